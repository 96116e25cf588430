package runner

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro/runner/decode"
)

// Disposition says what the runner does about a failure.
type Disposition uint8

// Dispositions.
const (
	// Transient: retry the same work after a bounded backoff; never quarantined.
	Transient Disposition = iota + 1
	// Poison: record a blocking quarantine for the source transaction and stop
	// consuming until an operator asks for a retry.
	Poison
	// Fatal: a configuration or capability problem; the runner refuses to go on.
	Fatal
)

func (d Disposition) String() string {
	switch d {
	case Transient:
		return "transient"
	case Poison:
		return "poison"
	case Fatal:
		return "fatal"
	}
	return "invalid"
}

// Verdict is the classification of one failure.
type Verdict struct {
	Disposition Disposition
	// Class is the bounded failure class (^[a-z0-9_]{1,48}$) for Poison.
	Class string
	// RelationID is the Synchro relation id the failure names, when known.
	RelationID *int64
	// SQLState is the PostgreSQL error code, when the failure is one.
	SQLState string
}

// poisonSQLStates maps the materializer's poison SQLSTATEs to their classes.
var poisonSQLStates = map[string]string{
	"SYP01": "fence_mismatch",
	"SYP02": "truncate",
	"SYP03": "relation_drift",
	"SYP04": "unknown_relation",
	"SYP05": "message_format",
	"SYP06": "stream_order",
	"SYP07": "toast_missing",
	"SYP08": "bootstrap_incomplete",
}

var relationIDDetail = regexp.MustCompile(`(?:^|[^a-z_])relation_id=([0-9]{1,19})\b`)

// IsTransientSQLState reports whether a PostgreSQL error code is worth retrying
// as it is: connection exceptions (08), serialization failure and deadlock
// (40001, 40P01), insufficient resources (53), operator intervention by shutdown
// (57P01, 57P02, 57P03), and a session the server ended for its idle or transaction
// time (57P05 idle_session_timeout, 25P03 idle_in_transaction_session_timeout, 25P04
// transaction_timeout on PostgreSQL 17+): the apply session a quiet stream leaves idle
// was closed, and the next transaction's COPY on it was quarantined as poison
// (TestAckEdgeIdleSessionTimeoutIsNoPoison).
func IsTransientSQLState(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "40001", "40P01", "57P01", "57P02", "57P03", "57P05", "25P03", "25P04":
		return true
	case "SYW01":
		// A projection bootstrap in effect is not staged yet
		// (synchro._bootstrap_catch_up): nothing was written; the loop stages it.
		return true
	case "SYW02":
		// The pack refused this runner as older than itself
		// (synchro.runner_stage_open): nothing was written; the next session's start
		// finds the pack newer and waits (pack.go).
		return true
	case "SYR01":
		// An open stream reset blocks the old stream (synchro._reset_guard):
		// nothing was written; the loop serves the reset next.
		return true
	case "57014", "55P03":
		// A statement or lock timeout (or a cancel) says nothing about the source
		// transaction: retrying it later is the same work, so it is never poison.
		return true
	}
	return false
}

// Classify decides what a failure of decoding, collating, staging or
// materializing a source transaction means. SQLSTATE classes decide, never
// message text.
func Classify(err error) Verdict {
	if err == nil {
		return Verdict{}
	}
	// A session that could not be opened says nothing about a source transaction:
	// it is never poison, whatever its SQLSTATE.
	var ce *connectError
	if errors.As(err, &ce) {
		return classifyConnect(ce)
	}
	if c, ok := decode.ClassOf(err); ok {
		switch c {
		case decode.ClassCapabilityUnsupported, decode.ClassConfigInvalid, decode.ClassValueNotRepresentable:
			return Verdict{Disposition: Fatal, Class: string(c)}
		case decode.ClassStopped, decode.ClassTableSetChanged:
			// A stopped collator is the runner's own bug, not the transaction's.
			return Verdict{Disposition: Transient, Class: string(c)}
		}
		return Verdict{Disposition: Poison, Class: string(c)}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		v := Verdict{SQLState: pgErr.Code}
		switch {
		case IsTransientSQLState(pgErr.Code), pgErr.Severity == "FATAL", pgErr.Severity == "PANIC":
			// FATAL and PANIC end the session, whatever the code: the session's
			// end, not the source transaction's content.
			v.Disposition = Transient
			return v
		case poisonSQLStates[pgErr.Code] != "":
			v.Class = poisonSQLStates[pgErr.Code]
		default:
			v.Class = "materialize_" + strings.ToLower(pgErr.Code)
		}
		v.Disposition = Poison
		v.RelationID = relationIDFrom(pgErr.Detail)
		return v
	}
	// Everything else comes from the connection or the context: a broken or
	// timed-out connection, a canceled context. Retrying is safe: nothing
	// uncommitted is kept and the slot is behind every uncommitted transaction.
	return Verdict{Disposition: Transient}
}

// IsTransientRefusal reports whether a server's refusal of a new session (an
// error of the startup exchange) passes with time, so that connecting again after
// a backoff is the remedy: connection exceptions (08), insufficient resources (53:
// 53300 too many connections, for the server, the database or the role), 55000
// (the database is not currently accepting connections: ALTER DATABASE ...
// ALLOW_CONNECTIONS false) and the server shutting down, crashing, starting up or
// in recovery (57P01, 57P02, 57P03). Every other refusal (28P01 and 28000
// authentication, 3D000 no such database, 42501 no CONNECT or REPLICATION
// privilege, anything unknown) needs an operator: fail closed.
func IsTransientRefusal(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "55000", "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// classifyConnect judges a failed connection attempt: Transient when the server
// was not reached (no SQLSTATE: refused, reset, timed out) or refused for now
// (IsTransientRefusal), Fatal when any attempt (pgx tries each host and TLS
// fallback, and joins their errors) was refused for good.
func classifyConnect(ce *connectError) Verdict {
	v := Verdict{Disposition: Transient}
	eachPgError(ce.err, func(e *pgconn.PgError) {
		if v.Disposition == Fatal {
			return
		}
		v.SQLState = e.Code
		if !IsTransientRefusal(e.Code) {
			v.Disposition = Fatal
		}
	})
	return v
}

// eachPgError calls f with every *pgconn.PgError in err's tree (errors.Join
// included), outermost first.
func eachPgError(err error, f func(*pgconn.PgError)) {
	switch e := err.(type) {
	case nil:
		return
	case *pgconn.PgError:
		f(e)
		return
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			eachPgError(inner, f)
		}
	case interface{ Unwrap() error }:
		eachPgError(e.Unwrap(), f)
	}
}

func relationIDFrom(detail string) *int64 {
	m := relationIDDetail.FindStringSubmatch(detail)
	if m == nil {
		return nil
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return nil
	}
	return &n
}

// isContextErr reports whether err is (or wraps) a context cancellation or
// deadline.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
)

func TestRunnerClassify(t *testing.T) {
	t.Parallel()
	pg := func(code, detail string) error {
		return fmt.Errorf("materialize: %w", &pgconn.PgError{Code: code, Message: "poison: x", Detail: detail})
	}
	id := func(n int64) *int64 { return &n }
	cases := []struct {
		name string
		err  error
		want Verdict
	}{
		{"connection", pg("08006", ""), Verdict{Disposition: Transient, SQLState: "08006"}},
		{"serialization", pg("40001", ""), Verdict{Disposition: Transient, SQLState: "40001"}},
		{"deadlock", pg("40P01", ""), Verdict{Disposition: Transient, SQLState: "40P01"}},
		{"resources", pg("53200", ""), Verdict{Disposition: Transient, SQLState: "53200"}},
		{"admin shutdown", pg("57P01", ""), Verdict{Disposition: Transient, SQLState: "57P01"}},
		{"crash shutdown", pg("57P02", ""), Verdict{Disposition: Transient, SQLState: "57P02"}},
		{"cannot connect now", pg("57P03", ""), Verdict{Disposition: Transient, SQLState: "57P03"}},
		{"fence", pg("SYP01", "relation_id=3"), Verdict{Disposition: Poison, Class: "fence_mismatch", SQLState: "SYP01", RelationID: id(3)}},
		{"truncate", pg("SYP02", "relation_id=12"), Verdict{Disposition: Poison, Class: "truncate", SQLState: "SYP02", RelationID: id(12)}},
		{"drift", pg("SYP03", ""), Verdict{Disposition: Poison, Class: "relation_drift", SQLState: "SYP03"}},
		{"unknown relation", pg("SYP04", "relation_id=5"), Verdict{Disposition: Poison, Class: "unknown_relation", SQLState: "SYP04", RelationID: id(5)}},
		{"message", pg("SYP05", ""), Verdict{Disposition: Poison, Class: "message_format", SQLState: "SYP05"}},
		{"order", pg("SYP06", ""), Verdict{Disposition: Poison, Class: "stream_order", SQLState: "SYP06"}},
		{"toast", pg("SYP07", "relation_id=9"), Verdict{Disposition: Poison, Class: "toast_missing", SQLState: "SYP07", RelationID: id(9)}},
		{"other sql", pg("23505", "Key (id)=(5) already exists."), Verdict{Disposition: Poison, Class: "materialize_23505", SQLState: "23505"}},
		{"statement timeout", pg("57014", ""), Verdict{Disposition: Transient, SQLState: "57014"}},
		{"runner release refused by the pack", pg("SYW02", ""), Verdict{Disposition: Transient, SQLState: "SYW02"}},
		{"reset in progress", pg("SYR01", ""), Verdict{Disposition: Transient, SQLState: "SYR01"}},
		{"lock timeout", pg("55P03", ""), Verdict{Disposition: Transient, SQLState: "55P03"}},
		{"raise", pg("P0001", "relation_id=x"), Verdict{Disposition: Poison, Class: "materialize_p0001", SQLState: "P0001"}},
		{"decode", &decode.Error{Class: decode.ClassMalformed, Detail: "short"}, Verdict{Disposition: Poison, Class: "decode_malformed"}},
		{"framing", fmt.Errorf("x: %w", &decode.Error{Class: decode.ClassTransactionFraming}), Verdict{Disposition: Poison, Class: "transaction_framing"}},
		{"capability", &decode.Error{Class: decode.ClassCapabilityUnsupported}, Verdict{Disposition: Fatal, Class: "decoder_capability_unsupported"}},
		{"config", &decode.Error{Class: decode.ClassConfigInvalid}, Verdict{Disposition: Fatal, Class: "config_invalid"}},
		{"eof", io.ErrUnexpectedEOF, Verdict{Disposition: Transient}},
		{"canceled", context.Canceled, Verdict{Disposition: Transient}},
		{"plain", errors.New("boom"), Verdict{Disposition: Transient}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, Classify(c.err))
		})
	}
}

func TestRunnerPoisonClassesAreBounded(t *testing.T) {
	t.Parallel()
	var classes []string
	for _, c := range poisonSQLStates {
		classes = append(classes, c)
	}
	for _, c := range decode.Classes() {
		classes = append(classes, string(c))
	}
	classes = append(classes, Classify(&pgconn.PgError{Code: "XX000"}).Class)
	for _, c := range classes {
		require.Regexp(t, `^[a-z0-9_]{1,48}$`, c)
	}
}

// A session the server refuses in the startup exchange is judged by the refusal's
// SQLSTATE, never as poison: the states an operator or a restart produce for a while
// are retried, the ones that need an operator are fatal (connectFailure wraps them in
// a fatalError, so every path stops on them); pgx's joined errors of several hosts or
// TLS fallbacks are fatal when any attempt was refused for good.
func TestRunnerClassifyConnect(t *testing.T) {
	t.Parallel()
	refused := func(code string) error {
		return &pgconn.PgError{Severity: "FATAL", Code: code, Message: "refused"}
	}
	cases := []struct {
		name  string
		err   error
		want  Disposition
		state string
	}{
		{"not accepting connections", refused("55000"), Transient, "55000"},
		{"starting up", refused("57P03"), Transient, "57P03"},
		{"too many connections", refused("53300"), Transient, "53300"},
		{"out of memory", refused("53200"), Transient, "53200"},
		{"admin shutdown", refused("57P01"), Transient, "57P01"},
		{"crash shutdown", refused("57P02"), Transient, "57P02"},
		{"connection failure", refused("08006"), Transient, "08006"},
		{"unreachable", io.ErrUnexpectedEOF, Transient, ""},
		{"bad password", refused("28P01"), Fatal, "28P01"},
		{"no login", refused("28000"), Fatal, "28000"},
		{"no database", refused("3D000"), Fatal, "3D000"},
		{"no privilege", refused("42501"), Fatal, "42501"},
		{"invalid database", refused("0A000"), Fatal, "0A000"},
		{"unknown", refused("XX000"), Fatal, "XX000"},
		{"fallback: for now, then for good", errors.Join(refused("57P03"), fmt.Errorf("host b: %w", refused("28P01"))), Fatal, "28P01"},
		{"fallback: unreachable, then for now", errors.Join(io.ErrUnexpectedEOF, refused("55000")), Transient, "55000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := connectFailure("control", fmt.Errorf("failed to connect: %w", c.err))
			v := Classify(err)
			require.Equal(t, c.want, v.Disposition)
			require.Equal(t, c.state, v.SQLState)
			require.Empty(t, v.Class, "a refused session is no poison class")
			var fatal *fatalError
			require.Equal(t, c.want == Fatal, errors.As(err, &fatal), "fatal refusals stop every path")
			require.True(t, isConnectFailure(err))
			if c.state != "" {
				require.Contains(t, err.Error(), "control")
			}
		})
	}
	// The same SQLSTATE from a query on an open session (an ERROR) is the work's, not
	// the session's: 55000 there is no passing state.
	require.Equal(t, Poison, Classify(fmt.Errorf("q: %w", &pgconn.PgError{Severity: "ERROR", Code: "55000"})).Disposition)
	// A FATAL ends the session, whatever its code: never the transaction's poison
	// (57P05 idle_session_timeout closed the idle apply session of a quiet stream).
	for _, code := range []string{"57P05", "25P03", "25P04", "XX000"} {
		require.Equal(t, Transient, Classify(fmt.Errorf("q: %w", refused(code))).Disposition, code)
	}
	require.Equal(t, Transient, Classify(fmt.Errorf("q: %w", &pgconn.PgError{Severity: "ERROR", Code: "57P05"})).Disposition)
}

// START_REPLICATION refused for its options (the output plugin's startup callback:
// 22023, 0A000) is a capability the server lacks: fatal, with the capability class,
// never retried; any other failure to start is returned for the loop's backoff
// (TestStartReplicationRefusesUnknownOption shows the server's answer).
func TestRunnerStartRefusal(t *testing.T) {
	t.Parallel()
	r := &Runner{cfg: Config{Decoder: "wal2json"}}
	for _, code := range []string{"22023", "0A000"} {
		err := r.startRefusal(fmt.Errorf("start: %w", &pgconn.PgError{Severity: "ERROR", Code: code, Message: "option \"x\" = \"y\" is unknown"}))
		var fatal *fatalError
		require.True(t, errors.As(err, &fatal), "%s: %v", code, err)
		c, ok := decode.ClassOf(err)
		require.True(t, ok)
		require.Equal(t, decode.ClassCapabilityUnsupported, c)
		require.Equal(t, Fatal, Classify(err).Disposition)
		require.Contains(t, err.Error(), "decoder wal2json")
	}
	for _, err := range []error{&pgconn.PgError{Code: "57P01"}, &pgconn.PgError{Code: "55006"}, io.ErrUnexpectedEOF} {
		got := r.startRefusal(err)
		var fatal *fatalError
		require.False(t, errors.As(got, &fatal), "%v", got)
		require.ErrorIs(t, got, err)
	}
}

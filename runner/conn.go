package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/gen"
)

// sessionParams are pinned on every session the runner opens, the replication
// connection included: the walsender renders pgoutput's column text with them,
// and the contract's row images need exactly these settings.
var sessionParams = [...][2]string{
	{"TimeZone", "UTC"},
	{"DateStyle", "ISO"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "3"},
	// bytea as hex and xml as content whatever the database's or role's defaults: the
	// walsender renders bytea with bytea_output, and the apply session reads xml
	// values with xmloption.
	{"bytea_output", "hex"},
	{"xmloption", "content"},
	// The runner's own statements name types and functions unqualified ($1::text,
	// count(*)); a startup parameter outranks the database's and the role's settings,
	// so a database owner's ALTER DATABASE … SET search_path = app, pg_catalog cannot
	// make them resolve to its own domain or function and run it as the runner's login
	// (which reads the message key). pg_temp last: the session's temporary objects are
	// the runner's own, named pg_temp.x where used.
	{"search_path", "pg_catalog, pg_temp"},
	// The baselines read registered tables planned as the pack's owner: the planner
	// folds a table's CHECK constraints (running the application's IMMUTABLE
	// functions) only under constraint_exclusion = on, which the database's owner
	// could set for every session.
	{"constraint_exclusion", "partition"},
	// The server must not end the runner's sessions for being idle: the second apply
	// session of a quiet stream waits for the next burst (classify treats such an end
	// as transient anyway).
	{"idle_session_timeout", "0"},
	{"idle_in_transaction_session_timeout", "0"},
}

// applyParams are the apply session's defaults, kept when the database URL sets
// its own. A batch's stage and work tables are temporary tables, held in the
// session's local buffers (temp_buffers, 8 MB by default): a batch of 5,000
// 1,000-row events overflowed them, and every materialization call wrote about
// 16 MB of them out and read them back (pg_stat_statements local_blks_written /
// local_blks_read: 8,022 / 8,342 blocks over four calls). The pairing sort spilled
// to disk at the default work_mem. Both are ceilings, allocated only as used, in
// the one apply session; temp_buffers must be set before the session's first
// temporary table, hence at connection start.
var applyParams = [...][2]string{
	{"temp_buffers", "128MB"},
	{"work_mem", "32MB"},
}

// errParseURL never echoes the URL: it may hold a password.
var errParseURL = errors.New("synchro: runner: cannot parse the database URL")

func pinParams(p map[string]string, app string) {
	for _, kv := range sessionParams {
		p[kv[0]] = kv[1]
	}
	p["application_name"] = app
	// The release this runner belongs to, by its newest migration: the pack refuses
	// a runner older than itself (synchro.runner_stage_open, SYW02). Not a setting
	// a URL can override.
	p["synchro.runner_pack"] = strconv.FormatInt(synchro.PackVersion(), 10)
}

// defaultConnectTimeout bounds a connection attempt whose URL sets no
// connect_timeout: after a network drop, an attempt must fail and be retried, not
// hang on a half-open connection.
const defaultConnectTimeout = 10 * time.Second

// connect opens a normal session with the pinned settings; defaults are set
// where the URL does not set them.
func connect(ctx context.Context, dbURL, app string, defaults ...[2]string) (*pgx.Conn, error) {
	cfg, err := connConfig(dbURL, app, defaults...)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectFailure(app, err)
	}
	if err := durableCommits(ctx, conn); err != nil {
		closeQuietly(ctx, conn)
		return nil, err
	}
	return conn, nil
}

// durableCommits raises the session's synchronous_commit from "off" to "local".
// ADR 001 acknowledges the slot only after a batch's commit is durable; under "off"
// a commit returns before its WAL is flushed, so a runner that inherited "off" from
// the database, its role or the URL would report the slot past a materialization a
// server crash then loses, and the restart would find the slot after the processed
// boundary. "local" is the local flush the ADR asks for. A stronger setting the
// database chose (on, remote_write, remote_apply: a synchronous standby) is kept:
// pinning "on" as a startup parameter would override a "local" chosen so that a
// standby that does not answer cannot hold every batch.
func durableCommits(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `SELECT pg_catalog.set_config('synchronous_commit', 'local', false)
		WHERE pg_catalog.current_setting('synchronous_commit') = 'off'`)
	if err != nil {
		return fmt.Errorf("synchro: runner: session durability: %w", err)
	}
	return nil
}

// connConfig is connect's configuration: the URL's, with the pinned settings,
// the defaults the URL does not set, and a connect timeout.
func connConfig(dbURL, app string, defaults ...[2]string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return nil, errParseURL
	}
	pinParams(cfg.RuntimeParams, app)
	for _, kv := range defaults {
		if _, set := cfg.RuntimeParams[kv[0]]; !set {
			cfg.RuntimeParams[kv[0]] = kv[1]
		}
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	return cfg, nil
}

// connectReplication opens a logical replication session (replication=database)
// with the pinned settings.
func connectReplication(ctx context.Context, dbURL string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(dbURL)
	if err != nil {
		return nil, errParseURL
	}
	pinParams(cfg.RuntimeParams, "synchro-runner-replication")
	cfg.RuntimeParams["replication"] = "database"
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = defaultConnectTimeout
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, connectFailure("replication", err)
	}
	return conn, nil
}

// connectError is a session that could not be opened: the server was not reached,
// or refused the session in the startup exchange. Classify judges it by the
// refusal's SQLSTATE (classifyConnect), not as an error of the work in hand.
type connectError struct {
	app string
	err error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("synchro: runner: connect (%s): %v", e.app, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

// isConnectFailure reports whether err is (or wraps) a failed connection attempt.
func isConnectFailure(err error) bool {
	var ce *connectError
	return errors.As(err, &ce)
}

// connectFailure wraps a failed connection attempt. A refusal that waiting does
// not fix (authentication, a database that does not exist, a missing privilege)
// is fatal: a runner that retried it would only look alive. Every other failure
// is returned for the caller's bounded backoff.
func connectFailure(app string, err error) error {
	ce := &connectError{app: app, err: err}
	if v := classifyConnect(ce); v.Disposition == Fatal {
		return &fatalError{err: fmt.Errorf(
			"synchro: fatal: the server refused the runner's session with SQLSTATE %s, which waiting does not fix: %w",
			v.SQLState, ce)}
	}
	return ce
}

// closeTimeout bounds a polite close on a connection that may be dead.
const closeTimeout = 2 * time.Second

// closeQuietly closes a connection, also after ctx was canceled.
func closeQuietly(ctx context.Context, conn *pgx.Conn) {
	if conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = conn.Close(cctx)
}

// closeReplication closes a replication connection, also after ctx was canceled.
func closeReplication(ctx context.Context, conn *pgconn.PgConn) {
	if conn == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = conn.Close(cctx)
}

// walsenderDecoding returns the reader's question to the server (reader.decoding):
// whether the walsender with pid is decoding, asked on a connection of its own,
// opened for the question and closed after it (a silent session is rare), within
// timeout. No answer (the server or the path down) is no.
func walsenderDecoding(dbURL string, pid uint32, timeout time.Duration) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		conn, err := connect(ctx, dbURL, "synchro-runner-probe")
		if err != nil {
			return false
		}
		defer closeQuietly(ctx, conn)
		busy, err := gen.New(conn).WalsenderDecoding(ctx, int32(pid))
		return err == nil && busy
	}
}

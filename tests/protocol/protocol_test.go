// Package protocol holds the replication-protocol edge tests of the runner: a keepalive
// inside a source transaction, a walsender terminated while a large transaction
// streams, wal_sender_timeout expiring during a long materialization, and the idle
// boundary when the last WAL belongs to another database. Each runs the production
// `synchro run` binary against a real PostgreSQL; the package has its own cluster
// (it reads that cluster's server log). The tests run one at a time: each holds long
// transactions or writes much WAL that every walsender of the cluster reads.
package protocol

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

func slotName(db *testdb.DB) string {
	s := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(s) > 63 {
		s = s[len(s)-63:]
	}
	return s
}

// setup: items (registered, owner: scopes) and scratch (not registered: its WAL is
// decoded and skipped).
func setup(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	exec(t, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, body text);
		CREATE TABLE scratch (n int, pad text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	return db
}

func exec(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

func count(t *testing.T, db *testdb.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func currentLSN(t *testing.T, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, q.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
	l, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return l
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// withOptions adds server settings to a connection URL (every connection of the
// runner, its walsender included, gets them).
func withOptions(t *testing.T, raw string, settings ...string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	var opts []string
	for _, s := range settings {
		opts = append(opts, "-c "+s)
	}
	q.Set("options", strings.Join(opts, " "))
	// Spaces as %20: libpq-style URL parsing does not read "+" as a space.
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String()
}

// run starts `synchro run` (the production binary) on db's slot.
func run(t *testing.T, bin, dbURL string, db *testdb.DB, args ...string) *runproc.Proc {
	t.Helper()
	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: dbURL, Slot: slotName(db), Args: args})
	// Creating the slot waits for every transaction running in the cluster.
	eventually(t, 3*time.Minute, "the stream to exist", func() bool {
		require.False(t, p.Exited(), "synchro run exited: %s\n%s", p.Exit(), p.Logs())
		return count(t, db, `SELECT count(*) FROM synchro.progress`) == 1
	})
	return p
}

func metric(p *runproc.Proc, name string, labels ...string) float64 {
	v, _ := p.Metric(name, labels...)
	return v
}

// commit runs sql in one transaction; it returns the transaction's xid (as the runner
// records it) and the WAL insert position just before COMMIT (the commit record is at
// or after it).
func commit(t *testing.T, db *testdb.DB, sql string) (xid int64, beforeCommit pglogrepl.LSN) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, sql)
	require.NoError(t, err, sql)
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint % 4294967296`).Scan(&xid))
	beforeCommit = currentLSN(t, tx)
	require.NoError(t, tx.Commit(ctx))
	return xid, beforeCommit
}

// exactlyOnce checks that source transaction xid was materialized once with events
// row events and one effect per event, and that nothing is quarantined.
func exactlyOnce(t *testing.T, db *testdb.DB, xid int64, events int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("materialization of xid %d", xid), func() bool {
		return count(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, xid) > 0
	})
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, xid))
	require.Equal(t, events, count(t, db, `SELECT event_count FROM synchro.txn WHERE xid % 4294967296 = $1`, xid))
	require.Equal(t, events, count(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.txn x USING (stream_generation, commit_lsn)
		WHERE x.xid % 4294967296 = $1`, xid))
	require.Equal(t, events, count(t, db, `SELECT count(*) FROM synchro.effect e JOIN synchro.txn x USING (stream_generation, commit_lsn)
		WHERE x.xid % 4294967296 = $1`, xid))
	require.Zero(t, count(t, db, `SELECT count(*) FROM synchro.quarantine`))
}

// serverLog is the private cluster's log so far ("" without one).
func serverLog(t *testing.T) string {
	t.Helper()
	c := testdb.Cluster()
	if c == nil {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(c.Dir(), "postgres.log"))
	require.NoError(t, err)
	return string(b)
}

// A walsender terminated while a large source transaction streams (the runner holds
// part of it, staged in an open materialization transaction): the runner drops the
// partial transaction, reconnects, and materializes the whole transaction once.
func TestWalsenderTerminatedMidTransaction(t *testing.T) {
	bin := runproc.BuildT(t)
	db := setup(t)
	// A small receive buffer: the runner reads the transaction at the pace it stages
	// it, so the walsender is inside it for a while.
	p := run(t, bin, db.URL, db, "--buffer-bytes", "65536", "--batch-bytes", "65536")

	before := currentLSN(t, db.Pool)
	// Large enough that the runner is inside it for seconds, whatever the machine.
	xid, beforeCommit := commit(t, db, `INSERT INTO items SELECT g, 'o' || g % 7, repeat('x', 100) FROM generate_series(1, 60000) g`)
	var received pglogrepl.LSN
	eventually(t, time.Minute, "the runner to be inside the transaction", func() bool {
		received = pglogrepl.LSN(metric(p, "synchro_runner_received_lsn"))
		return received > before && received < beforeCommit
	})
	terminated := count(t, db, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-replication') x`)
	require.Equal(t, 1, terminated)
	t.Logf("walsender terminated with the runner at %s, inside the transaction (%s .. %s)", received, before, beforeCommit)

	exactlyOnce(t, db, xid, 60000)
	require.Greater(t, metric(p, "synchro_runner_transient_errors_total"), 0.0)
	require.Greater(t, metric(p, "synchro_runner_reconnects_total"), 0.0)
	require.Zero(t, metric(p, "synchro_runner_transactions_total", "outcome", "duplicate"),
		"the partial transaction was never committed")
	require.False(t, p.Exited())
	require.NoError(t, p.Stop(30*time.Second))
}

// wal_sender_timeout expires during a long materialization: the materialization
// waits on a lock held on synchro.effect, the runner's receive buffer is full (so it
// reads nothing and answers no keepalive), and its own status updates are further
// apart than the server's wal_sender_timeout. The server ends the walsender for
// replication timeout; the runner reconnects once the lock is gone and materializes
// both transactions exactly once.
func TestWalSenderTimeoutDuringLongMaterialization(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("reads the private cluster's server log")
	}
	bin := runproc.BuildT(t)
	db := setup(t)
	ctx := context.Background()
	// wal_sender_timeout for this database's walsenders only, while the lock is held;
	// the walsender of the session that recovers runs with the server default (with
	// status updates further apart than the timeout, a slow machine could otherwise
	// time out again and again).
	exec(t, db, fmt.Sprintf(`ALTER DATABASE %q SET wal_sender_timeout = '1s'`, db.Name))
	// --batch-bytes: while the first transaction's call is in flight the applier
	// stages what follows in memory up to this bound before it waits for the call.
	// One apply connection: with a second, the second transaction would go to it
	// and the runner would go on reading (it holds back only once both wait).
	p := run(t, bin, db.URL, db, "--buffer-bytes", "65536", "--batch-bytes", "65536", "--standby-interval", "5s",
		"--receive-timeout", "60s", "--apply-sessions", "1")
	// The runner's walsenders, as they come and go.
	walsenders := map[int]bool{}
	seen := func() {
		rows, err := db.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'synchro-runner-replication'`)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		for _, pid := range pids {
			walsenders[pid] = true
		}
	}
	eventually(t, 30*time.Second, "the runner's walsender", func() bool { seen(); return len(walsenders) > 0 })

	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.effect IN EXCLUSIVE MODE`)
	require.NoError(t, err)

	first, _ := commit(t, db, `INSERT INTO items SELECT g, 'a', 'first' FROM generate_series(1, 100) g`)
	second, _ := commit(t, db, `INSERT INTO items SELECT g, 'b', repeat('y', 200) FROM generate_series(101, 5100) g`)
	// The server log names the process (log_line_prefix '%m [%p] ').
	eventually(t, 2*time.Minute, "the runner's walsender to time out", func() bool {
		seen()
		log := serverLog(t)
		for pid := range walsenders {
			if strings.Contains(log, fmt.Sprintf("[%d] LOG:  terminating walsender process due to replication timeout", pid)) {
				t.Logf("walsender %d timed out", pid)
				return true
			}
		}
		return false
	})
	require.Zero(t, count(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 IN ($1, $2)`, first, second),
		"nothing materialized while the lock is held")
	exec(t, db, fmt.Sprintf(`ALTER DATABASE %q RESET wal_sender_timeout`, db.Name))
	require.NoError(t, lock.Rollback(ctx))

	exactlyOnce(t, db, first, 100)
	exactlyOnce(t, db, second, 5000)
	require.Greater(t, metric(p, "synchro_runner_reconnects_total"), 0.0)
	require.False(t, p.Exited())
	require.NoError(t, p.Stop(30*time.Second))
}

// The server's idle boundary when the last WAL belongs to another database: the
// runner's walsender decodes and skips another database's transactions, and its
// keepalives carry a WAL end past them. The runner records that idle boundary, the
// slot follows, and nothing is materialized for the other database.
func TestIdleBoundaryPastAnotherDatabase(t *testing.T) {
	bin := runproc.BuildT(t)
	db := setup(t)
	ctx := context.Background()
	// A long heartbeat: the runner itself writes as little WAL as it can.
	p := run(t, bin, db.URL, db, "--heartbeat-interval", "1m")
	xid, _ := commit(t, db, `INSERT INTO items VALUES (1, 'a', 'first')`)
	exactlyOnce(t, db, xid, 1)
	txns := count(t, db, `SELECT count(*) FROM synchro.txn`)
	idle := metric(p, "synchro_runner_idle_boundaries_total")

	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	other := "synchro_other_" + strings.ToLower(slotName(db)[len(slotName(db))-8:])
	_, err = admin.Exec(ctx, `CREATE DATABASE `+other)
	require.NoError(t, err)
	defer func() {
		_, err := admin.Exec(context.Background(), `DROP DATABASE `+other+` WITH (FORCE)`)
		require.NoError(t, err)
	}()
	u, err := url.Parse(testdb.AdminURL())
	require.NoError(t, err)
	u.Path = "/" + other
	oc, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer oc.Close(ctx)
	_, err = oc.Exec(ctx, `CREATE TABLE items (id int8 PRIMARY KEY, owner text, body text);
		INSERT INTO items SELECT g, 'a', 'other' FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	end := currentLSN(t, oc)

	eventually(t, time.Minute, "durable progress, the slot and the acknowledgement past the other database's WAL", func() bool {
		var ok bool
		err := db.Pool.QueryRow(ctx, `SELECT p.processed_end_lsn >= $1::pg_lsn AND p.acknowledged_end_lsn >= $1::pg_lsn
			AND s.confirmed_flush_lsn >= $1::pg_lsn FROM synchro.progress p, pg_replication_slots s WHERE s.slot_name = $2`,
			end.String(), slotName(db)).Scan(&ok)
		require.NoError(t, err)
		return ok
	})
	require.Equal(t, txns, count(t, db, `SELECT count(*) FROM synchro.txn`), "nothing materialized for another database")
	require.Greater(t, metric(p, "synchro_runner_idle_boundaries_total"), idle)
	require.Zero(t, count(t, db, `SELECT count(*) FROM synchro.quarantine`))

	// The stream goes on after it.
	xid, _ = commit(t, db, `INSERT INTO items VALUES (2, 'a', 'after')`)
	exactlyOnce(t, db, xid, 1)
	require.NoError(t, p.Stop(30*time.Second))
}

// A keepalive before a deferred BEGIN: PostgreSQL 15's pgoutput sends BEGIN with the
// first published change, so while the walsender decodes a long run of unpublished
// changes at the start of transaction B it sends keepalives outside any transaction
// the runner saw, with a WAL end at B's commit record. The runner may record that as
// an idle boundary (every transaction whose commit record starts before it is durable;
// B's starts at it), and the slot may be acknowledged there. The runner is killed in
// that state, B not yet materialized: the next start decodes B from the slot and
// materializes it once.
func TestKilledAtIdleBoundaryBeforeDeferredBegin(t *testing.T) {
	bin := runproc.BuildT(t)
	db := setup(t)
	ctx := context.Background()
	dbURL := withOptions(t, db.URL, "wal_sender_timeout=2s")
	args := []string{"--standby-interval", "1500ms"}
	p := run(t, bin, dbURL, db, args...)
	xid, _ := commit(t, db, `INSERT INTO items VALUES (1, 'a', 'first')`)
	exactlyOnce(t, db, xid, 1)

	beforeB := currentLSN(t, db.Pool)
	xb, beforeCommitB := commit(t, db, `
		INSERT INTO scratch SELECT g, repeat('s', 50) FROM generate_series(1, 1000000) g;
		INSERT INTO items VALUES (2, 'b', 'after a long unpublished run')`)
	var seen pglogrepl.LSN
	eventually(t, 2*time.Minute, "an idle boundary at B's commit record while B is not materialized", func() bool {
		var processed string
		var materialized bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT processed_end_lsn::text,
			EXISTS (SELECT 1 FROM synchro.txn WHERE xid % 4294967296 = $1) FROM synchro.progress`, xb).Scan(&processed, &materialized))
		if materialized {
			// The scenario depends on the walsender's keepalives inside B's long
			// unpublished run arriving before B is materialized; a fast run can miss it.
			t.Skip("B was materialized before an idle boundary inside it was seen: scenario not reached in this run")
		}
		l, err := pglogrepl.ParseLSN(processed)
		require.NoError(t, err)
		seen = l
		return l >= beforeCommitB
	})
	p.Kill()
	require.Zero(t, count(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, xb))
	slot := count(t, db, `SELECT (confirmed_flush_lsn > $1::pg_lsn)::int FROM pg_replication_slots WHERE slot_name = $2`,
		beforeB.String(), slotName(db))
	t.Logf("killed with durable progress at %s (B: %s .. before commit %s), slot inside B: %v", seen, beforeB, beforeCommitB, slot == 1)

	eventually(t, 30*time.Second, "the killed runner's sessions to end", func() bool {
		return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name LIKE 'synchro-runner%'`) == 0
	})
	p2 := run(t, bin, dbURL, db, args...)
	exactlyOnce(t, db, xb, 1)
	var commitB string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT commit_lsn::text FROM synchro.txn WHERE xid % 4294967296 = $1`, xb).Scan(&commitB))
	t.Logf("B committed at %s", commitB)
	// Against B's own commit record, not the position read before its COMMIT: an idle
	// or heartbeat record written in between moves the commit record on.
	commitBLSN, err := pglogrepl.ParseLSN(commitB)
	require.NoError(t, err)
	require.LessOrEqual(t, seen, commitBLSN, "never past B's commit record")
	require.NoError(t, p2.Stop(30*time.Second))
}

package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Readiness (CONTRACT.md "Readiness", docs/sql/readiness.md): every test breaks one
// condition for real and sees ready() false with that check failing.

var readinessChecks = []string{"database", "worker", "heartbeat", "registry", "triggers", "publication",
	"slot", "poison", "progress", "wal_lag", "commit_lag"}

type readinessRow struct {
	Name   string
	OK     bool
	Detail string
}

// readinessOf is synchro.readiness() and synchro.ready(), read as synchro_app.
func readinessOf(t *testing.T, db *testdb.DB) ([]readinessRow, bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL ROLE synchro_app`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT check_name, ok, detail FROM synchro.readiness()`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readinessRow, error) {
		var x readinessRow
		return x, r.Scan(&x.Name, &x.OK, &x.Detail)
	})
	require.NoError(t, err)
	names := make([]string, len(out))
	for i, r := range out {
		names[i] = r.Name
	}
	require.Equal(t, readinessChecks, names, "the eleven checks, in the contract's order")
	var ready bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ready))
	return out, ready
}

func failingChecks(rows []readinessRow) []string {
	out := []string{}
	for _, r := range rows {
		if !r.OK {
			out = append(out, r.Name)
		}
	}
	return out
}

func checkRow(rows []readinessRow, name string) readinessRow {
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	return readinessRow{}
}

func readinessString(rows []readinessRow) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.Name)
		if r.OK {
			b.WriteString(" ok: ")
		} else {
			b.WriteString(" FAIL: ")
		}
		b.WriteString(r.Detail)
		b.WriteString("\n")
	}
	return b.String()
}

// waitReady waits until ready() is true (and every row ok).
func waitReady(t *testing.T, db *testdb.DB) []readinessRow {
	t.Helper()
	var rows []readinessRow
	// The floor of every wait (eventually): on a loaded machine a write once took more
	// than 10 s to become visible.
	deadline := time.Now().Add(minWait)
	for {
		var ready bool
		rows, ready = readinessOf(t, db)
		if ready && len(failingChecks(rows)) == 0 {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", readinessString(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFailing waits until ready() is false with check failing, and returns the table.
func waitFailing(t *testing.T, db *testdb.DB, check string) []readinessRow {
	t.Helper()
	var rows []readinessRow
	deadline := time.Now().Add(minWait)
	for {
		var ready bool
		rows, ready = readinessOf(t, db)
		if !ready && !checkRow(rows, check).OK {
			t.Logf("readiness:\n%s", readinessString(rows))
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %s did not fail:\n%s", check, readinessString(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireFailing: exactly these checks fail. A test breaks one condition; where the
// break needs the runner stopped first (a slot is dropped, copied or advanced only
// while no walsender holds it), worker fails with it.
func requireFailing(t *testing.T, rows []readinessRow, want ...string) {
	t.Helper()
	require.Equal(t, want, failingChecks(rows), "%s", readinessString(rows))
}

// readySystem is a registered table with a running runner, ready.
func readySystem(t *testing.T) (*testdb.DB, *runningRunner) {
	t.Helper()
	db := runnerSetup(t)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	waitReady(t, db)
	return db, rr
}

func TestReadinessBeforeRunner(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	rows, ready := readinessOf(t, db)
	require.False(t, ready)
	for _, name := range []string{"database", "worker", "heartbeat", "slot", "progress", "wal_lag", "commit_lag"} {
		require.False(t, checkRow(rows, name).OK, "%s before any runner:\n%s", name, readinessString(rows))
	}
	for _, name := range []string{"registry", "triggers", "publication", "poison"} {
		require.True(t, checkRow(rows, name).OK, "%s before any runner:\n%s", name, readinessString(rows))
	}
	require.Equal(t, "no runner has started", checkRow(rows, "worker").Detail)
}

// A healthy system is ready within seconds of the runner's start, and stays ready
// while it works.
func TestReadinessHealthy(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `INSERT INTO items (id, owner, note) VALUES (3, 'a', 'secret-note-value')`)
	waitEffects(t, db, 1)
	rows := waitReady(t, db)
	// Ready at every look while the runner materializes, idles and acknowledges: the
	// slot, progress and WAL position are read in an order that never races.
	for i := range 40 {
		mustExec(t, db, `UPDATE items SET v = v + 1 WHERE id = $1`, 1+i%2)
		got, ready := readinessOf(t, db)
		require.True(t, ready, "%s", readinessString(got))
	}
	t.Logf("readiness:\n%s", readinessString(rows))
	for _, r := range rows {
		require.NotContains(t, r.Detail, "secret-note-value")
	}
}

// stopRunner stops the runner cleanly and waits until its sessions are gone.
func stopRunner(t *testing.T, db *testdb.DB, rr *runningRunner) {
	t.Helper()
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
}

func TestReadinessDatabase(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	stopRunner(t, db, rr)
	// What a database restored or cloned under another name holds: the runner and the
	// stream recorded the database they ran in, and it is not this one.
	mustExec(t, db, `UPDATE synchro.runner SET database_name = 'elsewhere'`)
	rows := waitFailing(t, db, "database")
	requireFailing(t, rows, "database", "worker")
	require.Equal(t, "runner_database_matches=false stream_database_matches=true", checkRow(rows, "database").Detail)
}

func TestReadinessWorkerStopped(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	stopRunner(t, db, rr)
	rows := waitFailing(t, db, "worker")
	requireFailing(t, rows, "worker")
	require.Equal(t, "state=stopped claim_held=false backend_alive=false", checkRow(rows, "worker").Detail)
}

func TestReadinessHeartbeatAged(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	// The runner beats every 250ms; a limit of 1ms is exceeded by any heartbeat's age.
	mustExec(t, db, `UPDATE synchro.readiness_limit SET heartbeat = interval '1 millisecond'`)
	rows := waitFailing(t, db, "heartbeat")
	requireFailing(t, rows, "heartbeat")
	require.Contains(t, checkRow(rows, "heartbeat").Detail, "limit_s=0.001")
	mustExec(t, db, `UPDATE synchro.readiness_limit SET heartbeat = interval '30 seconds'`)
	waitReady(t, db)
}

func TestReadinessRegistryRenamed(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `ALTER TABLE items RENAME TO items_renamed`)
	rows := waitFailing(t, db, "registry")
	requireFailing(t, rows, "registry")
	require.Equal(t, "generation=1 relations=1 drifted=1 first=relation_id 1 renamed", checkRow(rows, "registry").Detail)
	mustExec(t, db, `ALTER TABLE items_renamed RENAME TO items`)
	waitReady(t, db)
}

func TestReadinessRegistryRecreated(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `
		DROP TABLE items;
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0, note text);`)
	rows := waitFailing(t, db, "registry")
	require.Equal(t, "generation=1 relations=1 drifted=1 first=relation_id 1 relation_missing", checkRow(rows, "registry").Detail)
	// The new table has none of the old one's triggers and is not in the publication.
	requireFailing(t, rows, "registry", "triggers", "publication")
}

func TestReadinessRegistryRetyped(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `ALTER TABLE items REPLICA IDENTITY FULL`)
	rows := waitFailing(t, db, "registry")
	require.Equal(t, "generation=1 relations=1 drifted=1 first=relation_id 1 replica_identity", checkRow(rows, "registry").Detail)
	requireFailing(t, rows, "registry")
	mustExec(t, db, `ALTER TABLE items REPLICA IDENTITY DEFAULT`)
	waitReady(t, db)

	mustExec(t, db, `ALTER TABLE items ALTER COLUMN v TYPE int8`)
	rows = waitFailing(t, db, "registry")
	require.Equal(t, "generation=1 relations=1 drifted=1 first=relation_id 1 columns", checkRow(rows, "registry").Detail)
	requireFailing(t, rows, "registry")
}

func TestReadinessTriggerDisabled(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `ALTER TABLE items DISABLE TRIGGER synchro_fence_update`)
	rows := waitFailing(t, db, "triggers")
	require.Equal(t, []string{"triggers"}, failingChecks(rows))
	require.Equal(t, "relations=1 triggers=5 failing=1 first=relation_id 1 synchro_fence_update disabled",
		checkRow(rows, "triggers").Detail)
	mustExec(t, db, `ALTER TABLE items ENABLE TRIGGER synchro_fence_update`)
	waitReady(t, db)

	mustExec(t, db, `DROP TRIGGER synchro_guard_truncate ON items`)
	rows = waitFailing(t, db, "triggers")
	require.Equal(t, "relations=1 triggers=5 failing=1 first=relation_id 1 synchro_guard_truncate missing",
		checkRow(rows, "triggers").Detail)
	requireFailing(t, rows, "triggers")
}

func TestReadinessPublication(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `ALTER PUBLICATION synchro DROP TABLE items`)
	rows := waitFailing(t, db, "publication")
	require.Contains(t, checkRow(rows, "publication").Detail, "published=0 missing=1 extra=0")
	requireFailing(t, rows, "publication")
	mustExec(t, db, `ALTER PUBLICATION synchro ADD TABLE ONLY items`)
	waitReady(t, db)

	// A row filter would silently keep changes from the stream.
	mustExec(t, db, `ALTER PUBLICATION synchro SET TABLE ONLY items WHERE (id > 1)`)
	rows = waitFailing(t, db, "publication")
	require.Contains(t, checkRow(rows, "publication").Detail, "published=1 missing=0 extra=0 filtered=1")
	requireFailing(t, rows, "publication")
	mustExec(t, db, `ALTER PUBLICATION synchro SET TABLE ONLY items`)
	waitReady(t, db)

	mustExec(t, db, `CREATE TABLE extra (id int PRIMARY KEY); ALTER PUBLICATION synchro ADD TABLE extra`)
	rows = waitFailing(t, db, "publication")
	require.Contains(t, checkRow(rows, "publication").Detail, "published=2 missing=0 extra=1")
	requireFailing(t, rows, "publication")
}

func TestReadinessSlotDropped(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	stopRunner(t, db, rr)
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, runnerSlot(db))
	rows := waitFailing(t, db, "slot")
	require.Equal(t, "slot missing", checkRow(rows, "slot").Detail)
	requireFailing(t, rows, "worker", "slot")
}

// A slot behind the recorded acknowledgement: the slot as an older copy of it was
// (what a crash that lost a slot advance leaves).
func TestReadinessSlotHeldBack(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	slot := runnerSlot(db)
	held := slot + "_held"
	if len(held) > 63 {
		held = held[len(held)-63:]
	}
	mustExec(t, db, `SELECT pg_copy_logical_replication_slot($1, $2)`, slot, held)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, held)
	})
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)
	stopRunner(t, db, rr)
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, slot)
	mustExec(t, db, `SELECT pg_copy_logical_replication_slot($1, $2)`, held, slot)
	rows := waitFailing(t, db, "slot")
	st, _ := runnerState(t, db)
	require.Less(t, slotLSN(t, db), lsnOf(t, st.Acked))
	require.Contains(t, checkRow(rows, "slot").Detail, "plugin_matches=true wal_status=")
	requireFailing(t, rows, "worker", "slot")

	// The runner's startup reconciliation advances it to the acknowledgement.
	startRunner(t, testRunnerConfig(t, db))
	waitReady(t, db)
}

// A slot past the processed boundary: WAL the stream never materialized is gone.
func TestReadinessSlotAdvanced(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	stopRunner(t, db, rr)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	mustExec(t, db, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, runnerSlot(db))
	rows := waitFailing(t, db, "slot")
	st, _ := runnerState(t, db)
	require.Greater(t, slotLSN(t, db), lsnOf(t, st.Processed))
	require.Contains(t, checkRow(rows, "slot").Detail, "processed_end_lsn="+*st.Processed)
	requireFailing(t, rows, "worker", "slot")
}

func TestReadinessPoison(t *testing.T) {
	t.Parallel()
	db, _, q := blockedStream(t, func(db *testdb.DB) {
		mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE items; COMMIT;`)
	})
	rows := waitFailing(t, db, "poison")
	require.Equal(t, "unresolved=1 first_commit_lsn="+q.CommitLSN+" class=truncate retry_requested=false",
		checkRow(rows, "poison").Detail)
	require.True(t, checkRow(rows, "worker").OK, "a blocked runner is still running:\n%s", readinessString(rows))
	requireFailing(t, rows, "poison")
}

// Durable progress that contradicts itself (its constraint dropped by the owner).
func TestReadinessProgress(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	stopRunner(t, db, rr)
	mustExec(t, db, `
		ALTER TABLE synchro.progress DROP CONSTRAINT progress_materialized_before_processed;
		UPDATE synchro.progress SET materialized_commit_lsn = processed_end_lsn + 4096;`)
	rows := waitFailing(t, db, "progress")
	require.Contains(t, checkRow(rows, "progress").Detail, "materialized_commit_lsn=")
	requireFailing(t, rows, "worker", "progress")
}

// WAL the runner has not processed, beyond a small limit, while it is stopped.
func TestReadinessWALLag(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	// The limit is tight only while the runner is stopped: the WAL position is the
	// cluster's, and the parallel tests' writes can keep a running runner more than
	// 64 KB behind it on a loaded machine.
	var limit int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT wal_lag_bytes FROM synchro.readiness_limit`).Scan(&limit))
	stopRunner(t, db, rr)
	mustExec(t, db, `UPDATE synchro.readiness_limit SET wal_lag_bytes = 65536`)
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'a', repeat('x', 200) FROM generate_series(10, 1009) g`)
	rows := waitFailing(t, db, "wal_lag")
	require.Contains(t, checkRow(rows, "wal_lag").Detail, "limit_bytes=65536")
	requireFailing(t, rows, "worker", "wal_lag")

	// The runner catches up: ready again.
	mustExec(t, db, `UPDATE synchro.readiness_limit SET wal_lag_bytes = $1`, limit)
	startRunner(t, testRunnerConfig(t, db))
	waitReady(t, db)
}

// A source commit the stopped runner has not materialized ages past a 1s limit.
func TestReadinessCommitLag(t *testing.T) {
	t.Parallel()
	db, rr := readySystem(t)
	// Tight only while the runner is stopped: on a loaded machine a running runner can
	// take more than a second to materialize a commit.
	var limit string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT commit_lag::text FROM synchro.readiness_limit`).Scan(&limit))
	stopRunner(t, db, rr)
	mustExec(t, db, `UPDATE synchro.readiness_limit SET commit_lag = interval '1 second'`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	rows := waitFailing(t, db, "commit_lag")
	require.Contains(t, checkRow(rows, "commit_lag").Detail, "limit_s=1.000")
	requireFailing(t, rows, "worker", "commit_lag")
	mustExec(t, db, `UPDATE synchro.readiness_limit SET commit_lag = $1::interval`, limit)
	startRunner(t, testRunnerConfig(t, db))
	waitReady(t, db)
}

// A missing, NULL, non-positive or infinite limit is not ready.
func TestReadinessLimits(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	for _, tc := range []struct{ set, check string }{
		{`heartbeat = NULL`, "heartbeat"},
		{`heartbeat = interval '0'`, "heartbeat"},
		{`heartbeat = interval '-1 second'`, "heartbeat"},
		{`wal_lag_bytes = NULL`, "wal_lag"},
		{`wal_lag_bytes = 0`, "wal_lag"},
		{`commit_lag = NULL`, "commit_lag"},
		{`commit_lag = interval '-5 seconds'`, "commit_lag"},
	} {
		mustExec(t, db, `UPDATE synchro.readiness_limit SET `+tc.set)
		rows := waitFailing(t, db, tc.check)
		require.Equal(t, []string{tc.check}, failingChecks(rows), tc.set)
		require.Contains(t, checkRow(rows, tc.check).Detail, "invalid", tc.set)
		mustExec(t, db, `UPDATE synchro.readiness_limit SET heartbeat = interval '30 seconds', wal_lag_bytes = 1073741824,
			commit_lag = interval '60 seconds'`)
		waitReady(t, db)
	}
	mustExec(t, db, `DELETE FROM synchro.readiness_limit`)
	rows := waitFailing(t, db, "wal_lag")
	require.Equal(t, []string{"heartbeat", "wal_lag", "commit_lag"}, failingChecks(rows))
}

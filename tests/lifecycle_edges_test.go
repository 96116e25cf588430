package tests

// The runner's lifecycle under an operator's hands (found by an independent review of
// the command line and the runner, 2026-12-05, twenty-fourth session): a retry asked
// for while an attempt is failing, and stops (SIGTERM) while the runner waits for the
// cluster's running transactions or past its drain bound. Each was red before its fix.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// A retry asked for after the repair, while an earlier attempt (started before the
// repair) is still failing, is served: the failed attempt recorded its poison with
// `retry_requested = false` and cleared the newer request, so the stream stayed
// blocked after the repair (synchro.poison said retry_requested=false). Requests are
// counted now, and an attempt clears only the one it ran under.
func TestRetryRequestDuringFailingAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _, q := blockedStream(t, breakEffects(t))
	require.Equal(t, "materialize_p0001", q.Class)

	// The operator's first retry (the cause not repaired yet). The quarantine row is
	// held, so that the attempt's failure waits to be recorded.
	mustExec(t, db, `SELECT synchro.retry_poison()`)
	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(ctx) })
	_, err = hold.Exec(ctx, `SELECT 1 FROM synchro.quarantine WHERE resolved_at IS NULL FOR UPDATE`)
	require.NoError(t, err)
	eventually(t, 20*time.Second, "the failing attempt to wait to record its poison", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%runner_poison%'`) > 0
	})
	// The repair, and a retry asked for after it, while that attempt is failing.
	mustExec(t, db, `DROP TRIGGER break_effects ON synchro.effect`)
	_, err = hold.Exec(ctx, `SELECT synchro.retry_poison()`)
	require.NoError(t, err)
	require.NoError(t, hold.Commit(ctx))

	deadline := time.Now().Add(20 * time.Second)
	for countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '9'`) == 0 {
		if time.Now().After(deadline) {
			var retry bool
			var attempts int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT retry_requested, attempts FROM synchro.poison`).Scan(&retry, &attempts))
			t.Fatalf("the stream stays blocked after the repair and a retry asked for after it: "+
				"synchro.poison retry_requested=%t attempts=%d", retry, attempts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.poison`))
}

// A SIGTERM while the first start's slot creation waits for a transaction running in
// the cluster (one idle application transaction holding an xid is enough) stops the
// runner cleanly and at once, as in a stream reset's same wait. It waited out the
// hidden 60 s drain bound, then exited 1 with "context canceled". A later start
// creates the stream.
func TestRunnerStopWhileFirstStartWaitsForSlot(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	release := holdXid(t, db)
	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db)})
	stopWhileSlotWaits(t, db, p, "the first start")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = '`+runnerSlot(db)+`'`),
		"a slot whose creation was stopped stays behind")

	release()
	p2 := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db)})
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	require.NoError(t, p2.Stop(30*time.Second), p2.Logs())
}

// The same wait in a projection bootstrap (a table registered on a running stream,
// its rows staged under a temporary slot's snapshot): a SIGTERM ends it, and the next
// start stages the bootstrap and materializes the table's rows.
func TestRunnerStopWhileBootstrapWaitsForSlot(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db)})
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)

	release := holdXid(t, db)
	mustExec(t, db, `
		CREATE TABLE notes (id int8 PRIMARY KEY, owner text);
		INSERT INTO notes VALUES (1, 'a'), (2, 'b');
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	stopWhileSlotWaits(t, db, p, "a projection bootstrap")

	release()
	p2 := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db)})
	eventually(t, 60*time.Second, "the bootstrap's rows after the restart", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.projection
			WHERE relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'notes')`) == 2
	})
	require.NoError(t, p2.Stop(30*time.Second), p2.Logs())
}

// The drain after a SIGTERM is bounded by --shutdown-timeout (60 s by default; it was
// hidden, and past it the process exited 1 with a bare "context canceled"). Past the
// bound the transaction in hand is abandoned, the exit status is 1 with an error that
// says so, and the next start replays the transaction.
func TestRunnerShutdownTimeoutAbandonsTheTransactionInHand(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	opts := runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db), Args: []string{"--shutdown-timeout", "2s"}}
	p := runproc.StartT(t, opts)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)

	held, release := holdMaterialization(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
	held()
	err := p.Stop(40 * time.Second)
	require.Error(t, err, "a drain past --shutdown-timeout exited 0:\n%s", p.Logs())
	require.NotContains(t, err.Error(), "killed", p.Logs())
	require.True(t, strings.Contains(p.Logs(), "shutdown timeout"), "the exit does not say why:\n%s", p.Logs())
	release()
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect`), "the abandoned transaction committed")

	p2 := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db)})
	waitEffects(t, db, 2)
	require.NoError(t, p2.Stop(30*time.Second), p2.Logs())
}

// holdXid opens a transaction that holds a transaction id, as an idle application
// transaction does: creating a logical slot waits for it. release ends it.
func holdXid(t *testing.T, db *testdb.DB) (release func()) {
	t.Helper()
	ctx := context.Background()
	open, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = open.Rollback(ctx) })
	_, err = open.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	return func() { require.NoError(t, open.Rollback(ctx)) }
}

// stopWhileSlotWaits waits until the runner's replication connection waits for a
// transaction (a slot's creation), then stops the process: it must exit 0 at once.
func stopWhileSlotWaits(t *testing.T, db *testdb.DB, p *runproc.Proc, what string) {
	t.Helper()
	eventually(t, 20*time.Second, what+" to wait for the open transaction", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'walsender' AND application_name = 'synchro-runner-replication'
			  AND datname = current_database() AND wait_event_type = 'Lock'`) > 0
	})
	start := time.Now()
	err := p.Stop(50 * time.Second)
	took := time.Since(start)
	require.NoError(t, err, "SIGTERM while %s waits for its slot: want exit 0\n%s", what, p.Logs())
	require.Less(t, took, 20*time.Second, "the stop waited for the open transaction (%s)", took)
}

package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Stream resets that must end in ready or failed, never in a loop of new candidates
// (an independent review's scenarios, each red before its fix). Not parallel: the
// reset tests create slots with exported snapshots.

// TestResetNewCandidateAfterStagedBaseline: once a candidate's baseline is
// staged (its reset_baseline records written), a candidate slot that goes missing or
// unusable during the catch-up makes the runner start a new candidate
// (runner_reset_candidate, docs/reset.md). The new candidate's baseline writes a
// reset_baseline record for every fence visible in its snapshot, and those of the
// first candidate were still there (reset_baseline is keyed by reset_id, fence_id and
// _reset_discard keeps them): a unique violation on every attempt. runner_reset_candidate
// deletes them now.
func TestResetNewCandidateAfterStagedBaseline(t *testing.T) {
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1'); INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	// One accepted push fence, visible to both candidates' snapshots.
	pushTask(t, db, "phone", 100)

	// Hold the marker back (runner_reset_mark takes write_fence in SHARE mode) so the
	// reset stays in catching_up, baseline staged.
	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	op := newOperator(t, db)
	id := op.begin(t, "candidate lost during catch-up")
	s := op.waitPhase(t, id, "catching_up")
	require.NotNil(t, s.CandidateSlot)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset_baseline WHERE reset_id = $1`, id))
	eventually(t, 60*time.Second, "the catch-up waiting to write its marker", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE d.datname = current_database() AND l.relation = 'synchro.write_fence'::regclass AND NOT l.granted`) > 0
	})
	// The runner goes down; the candidate slot is lost meanwhile (here: dropped, as
	// max_slot_wal_keep_size would invalidate it).
	_ = e.rr.stop(t) // canceled while it waits for the marker's lock
	waitRunnerGone(t, db)
	require.NoError(t, hold.Rollback(ctx))
	eventually(t, 20*time.Second, "the candidate slot idle", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, *s.CandidateSlot) == 1
	})
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, *s.CandidateSlot)

	// The runner starts a new candidate; the reset must still reach ready (or, at the
	// least, phase failed: never a loop of new candidates).
	e.startRunner(t)
	st := waitResetSettled(t, op, id)
	detail := st.detail()
	attempts := countOf(t, db, `SELECT attempt FROM synchro.reset WHERE reset_id = $1`, id)
	require.Equal(t, "ready", st.Phase, "reset on a new candidate: phase %s detail %q after %d candidates", st.Phase, detail, attempts)
}

// TestResetRecoversBypassedInsert: docs/reset.md names "a write that bypassed
// the fence triggers" as a poison that a stream reset recovers. An INSERT that bypassed
// them leaves a registered row without a row version; the reset's baseline refuses
// such a row (synchro._baseline_rows, SY400), and the runner took any SY400 of the
// baseline for "the operator aborted meanwhile" (resetFailure): it neither failed the
// reset nor got past it, and started a new candidate slot over and over. Such rows get
// a version before the candidate's snapshot now (synchro.runner_reset_versions), and an
// SY400 counts as moved on only when the reset did.
func TestResetRecoversBypassedInsert(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica;
		INSERT INTO notes VALUES ('n2', 'o1', 'bypassed the fence'); COMMIT;`)
	eventually(t, 20*time.Second, "the bypass quarantined", func() bool {
		q := quarantines(t, db)
		return len(q) == 1 && q[0].Class == "fence_mismatch" && !q[0].Resolved
	})

	op := newOperator(t, db)
	id := op.begin(t, "a write bypassed the fence triggers")
	st := waitResetSettled(t, op, id)
	detail := st.detail()
	attempts := countOf(t, db, `SELECT attempt FROM synchro.reset WHERE reset_id = $1`, id)
	t.Logf("registered rows without a row version: %d", countOf(t, db, `SELECT count(*) FROM notes n
		WHERE NOT EXISTS (SELECT 1 FROM synchro.row_version v JOIN synchro.relation r USING (relation_id)
		                   WHERE r.table_id = 'notes' AND v.pk = n.id)`))
	require.Equal(t, "ready", st.Phase, "reset after a bypassed insert: phase %s detail %q after %d candidates",
		st.Phase, detail, attempts)
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	rows, _ := fullRebuild(t, db, "after", "owner:o1", 1000)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2"}, rowKeys(rows), "the bypassed row is in the new stream")
}

// TestResetBaselineFailureIsRecorded: a blocking failure of the baseline (here
// relation drift: a registered column retyped, which synchro._live_shape_check refuses
// with 0A000) must move the reset to phase failed with its class (docs/reset.md:
// "failed | runner | staging or catch-up hit a blocking failure (detail names the
// class)"). resetStage called resetFailure while the failed baseline transaction was
// still open on the same connection: runner_reset_fail failed with 25P02, the error went
// back to the loop as transient, and the runner made new candidates for ever.
func TestResetBaselineFailureIsRecorded(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	mustExec(t, db, `ALTER TABLE notes ALTER COLUMN body TYPE varchar(100)`)

	op := newOperator(t, db)
	id := op.begin(t, "relation drift")
	st := waitResetSettled(t, op, id)
	attempts := countOf(t, db, `SELECT attempt FROM synchro.reset WHERE reset_id = $1`, id)
	require.Equal(t, "failed", st.Phase, "a baseline that cannot be staged: phase %s after %d candidates", st.Phase, attempts)
}

// waitResetSettled waits up to 30 s for reset id to reach ready or failed (a loop of
// new candidates stays in staging) and returns its status either way.
func waitResetSettled(t *testing.T, op *operator, id string) resetStatus {
	t.Helper()
	var st resetStatus
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st = op.status(t, id)
		if st.Phase == "ready" || st.Phase == "failed" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return st
}

// detail is the status's detail, "" when none.
func (s resetStatus) detail() string {
	if s.Detail == nil {
		return ""
	}
	return *s.Detail
}

// TestResetMarkerLetsPushesThrough: the catch-up's marker takes write_fence in SHARE
// mode (runner_reset_mark says why). One push transaction left open holds it back, and
// while its lock request waited, every later push queued behind it: one idle
// application transaction stalled every push of the database (and the reset) for as
// long as it stayed open. The marker gives up its request after a short lock_timeout
// and tries again, so other pushes go through meanwhile; it is written once the open
// transaction ends.
func TestResetMarkerLetsPushesThrough(t *testing.T) {
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1')`)
	// An application transaction left open with a push in it holds write_fence in ROW
	// EXCLUSIVE mode. Here the lock alone, taken before the reset: a push's xid would
	// also hold back the candidate slot's exported snapshot, which waits for every
	// transaction that has one (and a push opened after the snapshot is too late to
	// catch the marker).
	open, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(ctx) }()
	_, err = open.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	op := newOperator(t, db)
	id := op.begin(t, "marker behind an open push")
	eventually(t, 120*time.Second, "the catch-up trying to write its marker", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND phase = 'catching_up'`, id) == 1 &&
			countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE d.datname = current_database() AND l.relation = 'synchro.write_fence'::regclass AND NOT l.granted`) > 0
	})
	// Other clients' pushes still go through while the open one holds the marker back.
	for i := 0; i < 5; i++ {
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		raw, err := pushRawOn(pctx, db.Pool, "other", pushJSON(t, pushIns(pushID(), "tasks", 300+i, pm{"owner": "o1", "project_id": 1, "title": "other"})))
		cancel()
		require.NoError(t, err, "push %d waited behind the reset's marker", i)
		require.Contains(t, raw, `"accepted"`)
	}
	require.Nil(t, op.status(t, id).ActivationBarrier, "no marker while the push transaction is open")
	require.NoError(t, open.Commit(ctx))
	s := op.waitPhase(t, id, "ready")
	require.NotNil(t, s.ActivationBarrier)
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	rows, _ := fullRebuild(t, db, "after", "owner:o1", 1000)
	require.Subset(t, rowKeys(rows), []string{"tasks/300", "tasks/304"})
}

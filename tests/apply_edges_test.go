package tests

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// The pipelined, batched materialization (runner/apply.go, the two apply sessions of
// docs/sql/runner-internals.md), from an independent review (2026-12-04) that found no
// bug: what the existing batch and pipeline tests leave out, chiefly a poison at every
// position of a pipelined batch (its quarantine identity and the materialized prefix
// equal to the one-transaction-at-a-time reference's).

// reviewApplyTasksBypassed is a poison on tasks: a row event whose fence trigger was
// bypassed (fence_mismatch).
const reviewApplyTasksBypassed = `BEGIN;
	ALTER TABLE tasks DISABLE TRIGGER synchro_fence_insert;
	INSERT INTO tasks (id, project_id, owner, title) VALUES (9999, 1, 'a', 'poison');
	ALTER TABLE tasks ENABLE TRIGGER synchro_fence_insert;
	COMMIT;`

// reviewApplyRun is one way of materializing the same WAL.
type reviewApplyRun struct {
	name     string
	sessions int
	txns     int
	perTxn   bool
}

// reviewApplyDifferential writes workload on syncSchema with the runner stopped, then
// materializes the same WAL (copied slots) one transaction at a time through the
// reference path, and in each of runs. The workload ends in a poison: every run must
// stop at it, leaving exactly the reference's state (the transactions before it
// materialized, the same quarantine record: commit LSN, class, relation, attempts).
func reviewApplyDifferential(t *testing.T, workload func(db *testdb.DB), runs []reviewApplyRun) {
	t.Helper()
	// -short (CI): batches of 2 and large pipelined batches, against the reference, and
	// any way a test adds; make test runs all five.
	if testing.Short() {
		runs = append([]reviewApplyRun{reviewApplyRuns[1], reviewApplyRuns[3]}, runs[len(reviewApplyRuns):]...)
	}
	e := newSyncEnvSchema(t, syncSchema+`
		INSERT INTO project_members VALUES (1, 1, 'u1'), (2, 2, 'u2'), (3, 3, 'u3');
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, g % 4 + 1, 'a', 'seed' FROM generate_series(1, 20) g;`)
	db := e.db
	e.stopRunner(t)
	slotA := e.cfg.Slot
	slots := copySlots(t, db, slotA, len(runs))
	snapshotMaterialized(t, db)
	workload(db)

	blocked := func(rr *runningRunner) {
		t.Helper()
		eventually(t, 60*time.Second, "a quarantine record", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.quarantine`) > 0
		})
		eventually(t, 30*time.Second, "the poisoned heartbeat", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.runner WHERE state = 'poisoned'`) > 0
		})
		time.Sleep(300 * time.Millisecond) // a late write would show up in the dump
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
	}

	cfg := e.cfg
	cfg.PerTransaction = true
	rr := startRunner(t, cfg)
	blocked(rr)
	reference := dumpMaterialized(t, db)
	require.Len(t, quarantines(t, db), 1)

	for i, run := range runs {
		restoreMaterialized(t, db, slots[i])
		cfg = e.cfg
		cfg.Slot = slots[i]
		cfg.ApplySessions = run.sessions
		cfg.BatchTxns = run.txns
		cfg.BatchEvents = 1000000
		cfg.BatchDelay = time.Hour
		cfg.PerTransaction = run.perTxn
		rr = startRunner(t, cfg)
		blocked(rr)
		got := dumpMaterialized(t, db)
		t.Logf("%s: %.0f batches prepared, %.0f fallbacks", run.name, rr.counter(t, "synchro_runner_batches_prepared_total"),
			rr.counter(t, "synchro_runner_batch_fallbacks_total"))
		for _, tb := range materializedTables {
			require.Equal(t, reference[tb.name], got[tb.name], "synchro.%s differs between one-at-a-time and %s", tb.name, run.name)
		}
	}
}

var reviewApplyRuns = []reviewApplyRun{
	{"pipelined batches of 1", 2, 1, false},
	{"pipelined batches of 2", 2, 2, false},
	{"pipelined batches of 3", 2, 3, false},
	{"large pipelined batches", 2, 10000, false},
	{"large batches, one session", 1, 10000, false},
}

// A registry activation (a new scope rule), then at once a poison, then ordinary
// transactions. A pipelined batch closes right after the activation, so the poison
// is the first transaction of the batch after it, prepared (or not) while the
// activation's batch writes. Every way of batching stops at the poison with the
// reference's state and quarantine record.
func TestApplyEdgePoisonFirstAfterActivationDifferential(t *testing.T) {
	t.Parallel()
	eachDecoder(t, func(t *testing.T) {
		reviewApplyDifferential(t, func(db *testdb.DB) {
			for i := 0; i < 7; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET owner = '%s', v = v + 1 WHERE id = %d`, []string{"a", "b", "c"}[i%3], 1+i))
			}
			mustExec(t, db, `SELECT synchro.add_scope_rule('tasks', 'title:', 'title'); SELECT synchro.activate_registry();`)
			mustExec(t, db, reviewApplyTasksBypassed)
			for i := 100; i < 110; i++ {
				mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'a', 'after')`, i)
			}
		}, reviewApplyRuns)
	})
}

// A dependency change (it moves tasks between user scopes), ordinary transactions
// whose membership depends on it, a poison in the middle of a run, more ordinary
// transactions: the run before the poison is prepared while the dependency change's
// batch writes. Every way of batching stops at the poison with the reference's state.
func TestApplyEdgePoisonAfterDependencyChangeDifferential(t *testing.T) {
	t.Parallel()
	eachDecoder(t, func(t *testing.T) {
		reviewApplyDifferential(t, func(db *testdb.DB) {
			for i := 0; i < 5; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET project_id = %d WHERE id = %d`, 1+i%4, 1+i))
			}
			mustExec(t, db, `UPDATE project_members SET user_id = 'u9' WHERE id = 1`)
			for i := 0; i < 4; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET project_id = 1, v = v + 1 WHERE id = %d`, 10+i))
			}
			mustExec(t, db, reviewApplyTasksBypassed)
			for i := 100; i < 105; i++ {
				mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'a', 'after')`, i)
			}
		}, reviewApplyRuns)
	})
}

// A bypassed TRUNCATE of a capture dependency (a truncate poison) right after a run
// of ordinary transactions and a dependency change, in every batching.
func TestApplyEdgeTruncateDifferential(t *testing.T) {
	t.Parallel()
	eachDecoder(t, func(t *testing.T) {
		reviewApplyDifferential(t, func(db *testdb.DB) {
			for i := 0; i < 5; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET owner = 'b', v = v + 1 WHERE id = %d`, 1+i))
			}
			mustExec(t, db, `INSERT INTO project_members VALUES (4, 4, 'u4')`)
			mustExec(t, db, `UPDATE tasks SET owner = 'c' WHERE id = 6`)
			mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE project_members; COMMIT;`)
			for i := 100; i < 105; i++ {
				mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'a', 'after')`, i)
			}
		}, reviewApplyRuns)
	})
}

// A poison as the FIRST transaction of the batch prepared behind the batch in flight
// (row 500's, held in its write): the quarantine is the poison's own commit LSN and
// class, row 500's transaction stays materialized once, nothing after the poison is
// materialized, and the slot and the recorded acknowledgement stay before it.
func TestApplyEdgePoisonFirstOfPreparedBatch(t *testing.T) {
	t.Parallel()
	db, _, rr, release, from := startPipeline(t, false, func(*runner.Config) {})
	pipelineHead(t, db)
	eventually(t, 30*time.Second, "items 100..109", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 BETWEEN 100 AND 109`) == 10
	})
	lo := currentLSN(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (500, 'a')`)
	hi := currentLSN(t, db)
	eventually(t, 30*time.Second, "row 500's batch to wait for the lock", func() bool { return heldAt(t, db, 500) != 0 })
	poisonLo := currentLSN(t, db)
	mustExec(t, db, bypassedFence)
	poisonHi := currentLSN(t, db)
	for i := 200; i < 210; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	end := currentLSN(t, db)
	waitHeldInFlight(t, db, rr, end)
	require.Empty(t, quarantines(t, db), "nothing is judged while the batch before writes")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, lo.String()))
	release()

	q := requireQuarantinedBetween(t, db, "fence_mismatch", poisonLo, poisonHi)
	require.NotNil(t, q.RelationID)
	require.Equal(t, itemsRelationID(t, db), *q.RelationID)
	require.Equal(t, 1, q.Attempts)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn AND commit_lsn < $2::pg_lsn`,
		lo.String(), hi.String()), "row 500's transaction is materialized")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '500'`), "once")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 BETWEEN 200 AND 209 OR pk = '999'`))
	require.Equal(t, 11, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()),
		"items 100..109, row 500's, nothing else")
	st, _ := runnerState(t, db)
	require.Less(t, lsnOf(t, st.Acked), lsnOf(t, &q.CommitLSN))
	require.Less(t, slotLSN(t, db), lsnOf(t, &q.CommitLSN))
}

// reviewApplyOtherApplyBackend is the apply backend that is not pid, idle (not in a
// transaction) after a COMMIT: the prepared batch that committed what it prepared and
// waits for the batch before (0 when none).
func reviewApplyOtherApplyBackend(t *testing.T, db *testdb.DB, pid int) int {
	t.Helper()
	var other int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT coalesce(min(pid), 0) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-apply' AND pid <> $1
		  AND state = 'idle' AND query ILIKE 'commit%'`, pid).Scan(&other))
	return other
}

// The apply session of the prepared batch is terminated while it waits (between
// materialize_prepare's commit and materialize_write) for the batch in flight, and
// separately the writing session is terminated while the next batch waits prepared.
// Both are transient: no quarantine, every transaction materialized exactly once, in
// commit order, the acknowledgement follows.
func TestApplyEdgeKillPreparedWhileWaiting(t *testing.T) {
	t.Parallel()
	db, _, rr, release, from := startPipeline(t, false, func(*runner.Config) {})
	m := pipelineWorkload(t, db)
	waitHeldInFlight(t, db, rr, m.end)
	held := heldAt(t, db, 500)
	var prepared int
	eventually(t, 30*time.Second, "the prepared batch to wait", func() bool {
		prepared = reviewApplyOtherApplyBackend(t, db, held)
		return prepared != 0
	}, func() { logClusterActivity(t, db, "prepared") })
	mustExec(t, db, `SELECT pg_terminate_backend($1)`, prepared)
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, quarantines(t, db))
	release()
	requireEachOnce(t, db, from)
	require.Empty(t, quarantines(t, db), "a lost session is no poison")
	waitAcked(t, db)
}

func TestApplyEdgeKillWriterWhilePrepared(t *testing.T) {
	t.Parallel()
	db, _, rr, release, from := startPipeline(t, false, func(*runner.Config) {})
	m := pipelineWorkload(t, db)
	waitHeldInFlight(t, db, rr, m.end)
	held := heldAt(t, db, 500)
	eventually(t, 30*time.Second, "the prepared batch to wait", func() bool {
		return reviewApplyOtherApplyBackend(t, db, held) != 0
	}, func() { logClusterActivity(t, db, "prepared") })
	mustExec(t, db, `SELECT pg_terminate_backend($1)`, held)
	eventually(t, 60*time.Second, "the next session to wait at row 500 again", func() bool {
		n := heldAt(t, db, 500)
		return n != 0 && n != held
	})
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, m.lo.String()),
		"nothing from row 500's transaction on is durable")
	release()
	requireEachOnce(t, db, from)
	require.Empty(t, quarantines(t, db))
	waitAcked(t, db)
}

// A source transaction far larger than BatchEvents, BatchBytes and BufferBytes, among
// small ones, pipelined: one batch of its own, every row once, nothing falls back, and
// the result equals a run with one apply session.
func TestApplyEdgeHugeTransactionSmallBounds(t *testing.T) {
	t.Parallel()
	db, cfg, _ := stoppedStream(t)
	slotA := cfg.Slot
	slotB := slotA[:min(len(slotA), 60)] + "_b"
	mustExec(t, db, `SELECT pg_copy_logical_replication_slot($1, $2)`, slotA, slotB)
	snapshotMaterialized(t, db)
	for i := 100; i < 120; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'b', repeat('y', 300) FROM generate_series(1000, 5999) g`)
	for i := 200; i < 220; i++ {
		mustExec(t, db, `UPDATE items SET v = v + 1, owner = 'c' WHERE id = $1`, 1000+i)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	mustExec(t, db, `DELETE FROM items WHERE id BETWEEN 1000 AND 1999`)
	for i := 300; i < 310; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}

	run := func(slot string, sessions int) (map[string]string, *runningRunner) {
		c := cfg
		c.Slot = slot
		c.ApplySessions = sessions
		c.BatchEvents = 50
		c.BatchTxns = 4
		c.BatchBytes = 8 << 10
		c.BufferBytes = 32 << 10
		rr := startRunner(t, c)
		catchUp(t, db)
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		return dumpMaterialized(t, db), rr
	}
	pipelined, rr := run(slotA, 2)
	require.Zero(t, rr.counter(t, "synchro_runner_batch_fallbacks_total"))
	require.Empty(t, quarantines(t, db))
	require.Equal(t, 5000-1000+20+20+10, countOf(t, db, `SELECT count(*) FROM synchro.projection p
		JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'items' AND p.pk::int8 >= 100`))
	restoreMaterialized(t, db, slotB)
	single, _ := run(slotB, 1)
	for _, tb := range materializedTables {
		require.Equal(t, single[tb.name], pipelined[tb.name], "synchro.%s differs between one and two apply sessions", tb.name)
	}
}

// Out-of-line values: a note whose large body an update leaves unchanged (unchanged
// TOAST), as the last transaction after a run and as the first before one, a push
// between runs, then a poison on notes (text keys) followed by ordinary transactions.
func TestApplyEdgeToastAndPushDifferential(t *testing.T) {
	t.Parallel()
	eachDecoder(t, func(t *testing.T) {
		reviewApplyDifferential(t, func(db *testdb.DB) {
			mustExec(t, db, `INSERT INTO notes SELECT 'toast', 'a', string_agg(md5(g::text), '') FROM generate_series(1, 400) g`)
			for i := 0; i < 3; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET owner = 'b', v = v + 1 WHERE id = %d`, 1+i))
			}
			mustExec(t, db, `UPDATE notes SET owner = 'b' WHERE id = 'toast'`)
			mustExec(t, db, `UPDATE notes SET owner = 'c' WHERE id = 'toast'`)
			for i := 0; i < 3; i++ {
				mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET owner = 'c', v = v + 1 WHERE id = %d`, 4+i))
			}
			mustExec(t, db, `SELECT synchro.push('client1', '[{"id": "00000000-0000-4000-8000-000000000001", "table": "tasks", "op": "insert", "pk": 77, "row": {"project_id": 2, "owner": "b", "title": "pushed"}}]'::jsonb)`)
			mustExec(t, db, `UPDATE notes SET owner = 'a' WHERE id = 'toast'`)
			mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'a', 'x')`)
			mustExec(t, db, `BEGIN;
				ALTER TABLE notes DISABLE TRIGGER synchro_fence_update;
				UPDATE notes SET owner = 'b' WHERE id = 'n1';
				ALTER TABLE notes ENABLE TRIGGER synchro_fence_update;
				COMMIT;`)
			for i := 100; i < 104; i++ {
				mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'a', 'after')`, i)
			}
		}, reviewApplyRuns)
	})
}

// The reader's byte budget (BufferBytes) and the COPY bound (BatchBytes) far below a
// 2,000-row transaction that arrives while row 500's batch is held in its write and
// the batch after it is prepared: no deadlock, every transaction once, in order.
func TestApplyEdgeBudgetWhilePrepared(t *testing.T) {
	t.Parallel()
	db, _, rr, release, from := startPipeline(t, false, func(cfg *runner.Config) {
		cfg.BufferBytes = 16 << 10
		cfg.BatchBytes = 8 << 10
		cfg.BatchEvents = 100
	})
	m := pipelineWorkload(t, db)
	eventually(t, 30*time.Second, "row 500's batch to wait for the lock", func() bool { return heldAt(t, db, 500) != 0 })
	time.Sleep(time.Second)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, m.lo.String()))
	release()
	requireEachOnce(t, db, from)
	require.Empty(t, quarantines(t, db))
	require.Zero(t, rr.counter(t, "synchro_runner_batch_fallbacks_total"))
	waitAcked(t, db)
}

// A random workload (batchWorkload: pushes, dependency changes, unchanged TOAST, a
// registry activation, rows changed several times in a transaction) cut by a poison
// at a random point: every batching stops at the poison with the reference's state.
func TestApplyEdgeRandomPoisonDifferential(t *testing.T) {
	t.Parallel()
	// A fixed seed, so that CI is deterministic; SYNCHRO_APPLY_SEED explores others.
	seed := int64(20261204)
	if v := os.Getenv("SYNCHRO_APPLY_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "SYNCHRO_APPLY_SEED")
		seed = n
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	reviewApplyDifferential(t, func(db *testdb.DB) {
		batchWorkload(t, db, rng, 30+rng.Intn(60))
		mustExec(t, db, reviewApplyTasksBypassed)
		for i := 0; i < 5; i++ {
			mustExec(t, db, fmt.Sprintf(`UPDATE tasks SET owner = 'b', v = v + 1 WHERE id = %d`, 1+rng.Intn(20)))
		}
	}, append(reviewApplyRuns, reviewApplyRun{"pipelined batches of 4", 2, 4, false}))
}

package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// The applier keeps one materialization batch in flight (its materialize_batch call
// and COMMIT run in a goroutine) while it decodes and stages the next batch in memory
// (runner/apply.go, docs/runner.md). These tests hold a batch in flight on purpose,
// with a trigger on synchro.effect that waits for an advisory lock the test holds when
// it meets row 500, so that the next batch is staged behind it, then fail it, stop the
// runner, or cancel its work under it.

// pipelineLock is the advisory lock the trigger waits for (per database: parallel
// tests do not share it).
const pipelineLock = 4242

// pipelineWorkload is what every pipeline test writes with the runner attached:
// single-row transactions 100..109, row 500 alone (the one whose materialization
// waits), a 2,000-row transaction (1000..2999), and single-row transactions 200..209.
// It returns the WAL positions just before and just after row 500's transaction and
// the WAL position after everything.
func pipelineWorkload(t *testing.T, db *testdb.DB) (lo, hi, end pglogrepl.LSN) {
	t.Helper()
	for i := 100; i < 110; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	lo = currentLSN(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (500, 'a')`)
	hi = currentLSN(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'a', repeat('x', 100) FROM generate_series(1000, 2999) g`)
	for i := 200; i < 210; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	return lo, hi, currentLSN(t, db)
}

// pipelineRows is the number of rows pipelineWorkload writes, in 22 source
// transactions.
const pipelineRows, pipelineTxns = 10 + 1 + 2000 + 10, 22

func currentLSN(t *testing.T, db *testdb.DB) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

// holdAtRow500 installs the trigger (raise: it fails row 500's batch once it has the
// lock) and takes the advisory lock on a connection of its own; the returned function
// releases it.
func holdAtRow500(t *testing.T, db *testdb.DB, raise bool) (release func()) {
	t.Helper()
	fail := ""
	if raise {
		fail = "RAISE EXCEPTION 'broken';"
	}
	mustExec(t, db, fmt.Sprintf(`
		CREATE FUNCTION public.hold_row_500() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF NEW.pk = '500' THEN
		    PERFORM pg_catalog.pg_advisory_xact_lock(%d);
		    %s
		  END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER hold_row_500 BEFORE INSERT ON synchro.effect
		  FOR EACH ROW EXECUTE FUNCTION public.hold_row_500();`, pipelineLock, fail))
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, pipelineLock)
	require.NoError(t, err)
	released := false
	release = func() {
		if released {
			return
		}
		released = true
		_, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, pipelineLock)
		require.NoError(t, err)
		conn.Release()
	}
	t.Cleanup(release)
	return release
}

// waitHeldInFlight waits until row 500's batch waits for the lock inside its
// materialization and the runner has received the whole workload (end), then gives
// the applier a moment to stage what follows in memory (nothing asserts on it: the
// assertions hold whatever it staged).
func waitHeldInFlight(t *testing.T, db *testdb.DB, rr *runningRunner, end pglogrepl.LSN) {
	t.Helper()
	eventually(t, 30*time.Second, "row 500's batch to wait for the lock", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
	})
	eventually(t, 30*time.Second, "the runner to receive the workload", func() bool {
		return pglogrepl.LSN(rr.gauge(t, "synchro_runner_received_lsn")) >= end
	})
	time.Sleep(500 * time.Millisecond)
}

// requireEachOnce checks that every row of the workload has exactly one effect and every source transaction of it one ledger row.
func requireEachOnce(t *testing.T, db *testdb.DB, from pglogrepl.LSN) {
	t.Helper()
	const workload = `SELECT count(*) FROM synchro.effect WHERE pk NOT IN ('1', '2')`
	eventually(t, 60*time.Second, "every row of the workload", func() bool {
		return countOf(t, db, workload) >= pipelineRows
	})
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`),
		"no row materialized twice")
	require.Equal(t, pipelineRows, countOf(t, db, workload), "none lost")
	require.Equal(t, pipelineTxns, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()),
		"one ledger row per source transaction")
}

// A batch that fails while the next one is staged behind it: the failure is the
// in-flight batch's (its transactions are re-run alone and row 500's is quarantined
// with its own commit LSN, not the staged transaction's), nothing after it is
// materialized or acknowledged, and after a repair and a retry every transaction of
// the workload is materialized exactly once. Attributing the failure to the batch
// being staged (a 2,000-row transaction cut at BatchBytes, still open) quarantines
// the wrong transaction.
func TestBatchPipelineFailureBelongsToTheBatchInFlight(t *testing.T) {
	t.Parallel()
	db, _, rr, release, from := startPipeline(t, true, func(cfg *runner.Config) {
		cfg.BatchBytes = 16 << 10 // the 2,000-row transaction crosses it while staged
	})

	lo, hi, end := pipelineWorkload(t, db)
	waitHeldInFlight(t, db, rr, end)
	release()

	var q []quarantineRow
	eventually(t, 30*time.Second, "a quarantine record", func() bool {
		q = quarantines(t, db)
		return len(q) > 0
	})
	require.Len(t, q, 1)
	require.Equal(t, "materialize_p0001", q[0].Class)
	at := lsnOf(t, &q[0].CommitLSN)
	require.True(t, at > lo && at < hi, "row 500's transaction is quarantined with its own commit LSN (%s, not in %s..%s)", at, lo, hi)
	requireBlockedAt(t, db, q[0])
	require.Equal(t, 10, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 BETWEEN 100 AND 109`),
		"the transactions before it are materialized")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 200 AND pk <> '500'`),
		"nothing after it is")
	require.GreaterOrEqual(t, rr.counter(t, "synchro_runner_batch_fallbacks_total"), float64(1), "the batch fell back")

	mustExec(t, db, `DROP TRIGGER hold_row_500 ON synchro.effect`)
	mustExec(t, db, `SELECT synchro.retry_poison()`)
	requireEachOnce(t, db, from)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '500' AND commit_lsn = $1::pg_lsn`, q[0].CommitLSN),
		"the retried transaction keeps its replay identity")
}

// A stop while a batch is in flight and the next one staged: the runner finishes the
// call in flight (it commits once the lock is released), then the batch in hand, and
// stops cleanly; a cancellation of its work under a call in flight (the shutdown
// timeout passes) rolls it back instead. Either way the next session resumes without
// losing or repeating a transaction, and nothing outlives the session (the runner
// returns, its sessions end).
func TestBatchPipelineStopWhileInFlight(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shutdown time.Duration
	}{
		{"clean", 30 * time.Second},
		{"timeout", 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, cfg, rr, release, from := startPipeline(t, false, func(cfg *runner.Config) {
				cfg.ShutdownTimeout = tc.shutdown
			})

			_, _, end := pipelineWorkload(t, db)
			waitHeldInFlight(t, db, rr, end)
			rr.cancel() // the stop (rr.stop without its wait)
			if tc.shutdown > time.Second {
				time.Sleep(300 * time.Millisecond) // the stop arrives while the call waits
			} else {
				time.Sleep(tc.shutdown + time.Second) // the shutdown timeout cancels the call
			}
			release()
			err := rr.wait(t, 30*time.Second)
			if tc.shutdown > time.Second {
				require.NoError(t, err)
				require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '500'`),
					"the batch in flight committed")
			}
			waitRunnerGone(t, db)
			require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`))

			mustExec(t, db, `DROP TRIGGER hold_row_500 ON synchro.effect`)
			rr = startRunner(t, cfg)
			eventually(t, 30*time.Second, "the next session to stream", func() bool {
				return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
					AND application_name = 'synchro-runner-replication'`) > 0
			})
			requireEachOnce(t, db, from)
			waitAcked(t, db)
			require.NoError(t, rr.stop(t))
			waitRunnerGone(t, db)
		})
	}
}

// startPipeline starts a runner whose batches close only at their bounds (no time
// bound, 10,000 transactions), with row 500's materialization held (holdAtRow500;
// fail: it fails once released), and returns the WAL position before the workload.
func startPipeline(t *testing.T, fail bool, configure func(*runner.Config)) (*testdb.DB, runner.Config, *runningRunner,
	func(), pglogrepl.LSN) {
	t.Helper()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.BatchTxns = 10000
	cfg.BatchDelay = time.Hour
	configure(&cfg)
	rr := startRunner(t, cfg)
	waitStream(t, db)
	release := holdAtRow500(t, db, fail)
	return db, cfg, rr, release, currentLSN(t, db)
}

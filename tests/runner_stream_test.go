package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
)

func TestRunnerMaterializesInCommitOrder(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))

		start := waitStream(t, db)
		require.Equal(t, int64(1), start.Generation)
		// generation_start is one byte before the consistent point, where processing
		// starts: a commit record right at that point is the stream's.
		require.Equal(t, lsnOf(t, start.Start)+1, lsnOf(t, start.Processed), "a fresh stream starts right after generation_start")
		// The baseline projected the rows already there, without effects.
		require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.projection`))
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect`))

		mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES (3, 'a', 3)`)
		mustExec(t, db, `UPDATE items SET v = 10 WHERE id = 1`)
		mustExec(t, db, `DELETE FROM items WHERE id = 2`)
		mustExec(t, db, `UPDATE items SET owner = 'b' WHERE id = 3`)
		got := waitEffects(t, db, 5)

		type eff struct{ scope, pk, op string }
		var seq []eff
		for i, e := range got {
			seq = append(seq, eff{e.Scope, e.PK, e.Op})
			if i > 0 {
				require.GreaterOrEqual(t, lsnOf(t, &e.CommitLSN), lsnOf(t, &got[i-1].CommitLSN))
			}
		}
		require.Equal(t, []eff{
			{"owner:a", "3", "upsert"},
			{"owner:a", "1", "upsert"},
			{"owner:b", "2", "delete"},
			{"owner:a", "3", "delete"}, // left scope a
			{"owner:b", "3", "upsert"}, // entered scope b
		}, seq)
		require.Equal(t, 4, countOf(t, db, `SELECT count(*) FROM synchro.txn`))

		// Idle and caught up: slot, recorded acknowledgement and processed boundary agree.
		p := waitAcked(t, db)
		require.GreaterOrEqual(t, lsnOf(t, p.Processed), lsnOf(t, &got[len(got)-1].CommitLSN))
		require.Equal(t, float64(4), rr.counter(t, "synchro_runner_transactions_total", "outcome", "materialized"))

		// The heartbeat reports a streaming runner.
		eventually(t, 3*time.Second, "a streaming heartbeat", func() bool {
			var state string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM synchro.runner`).Scan(&state))
			return state == "streaming"
		})

		require.NoError(t, rr.stop(t))
		var state string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM synchro.runner`).Scan(&state))
		require.Equal(t, "stopped", state)
	})
}

func TestRunnerHeldTransactionLandsAfterLaterCommit(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := runnerSetup(t)
		startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		held, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = held.Rollback(ctx) }()
		_, err = held.Exec(ctx, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
		require.NoError(t, err)

		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (11, 'a')`)
		first := waitEffects(t, db, 1)
		require.Equal(t, "11", first[0].PK)

		require.NoError(t, held.Commit(ctx))
		got := waitEffects(t, db, 2)
		require.Equal(t, "11", got[0].PK)
		require.Equal(t, "10", got[1].PK)
		require.Less(t, lsnOf(t, &got[0].CommitLSN), lsnOf(t, &got[1].CommitLSN),
			"the held transaction began first but commits later: it lands after")
	})
}

func TestRunnerSecondRunnerRefuses(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		second := startRunner(t, testRunnerConfig(t, db))
		err := second.wait(t, 5*time.Second)
		require.ErrorIs(t, err, runner.ErrAlreadyRunning)

		// The first keeps working.
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
	})
}

func TestRunnerStopsCleanlyAndResumes(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		rr := startRunner(t, cfg)
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)

		// Written while no runner runs: materialized by the next one.
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		rr2 := startRunner(t, cfg)
		got := waitEffects(t, db, 2)
		require.Equal(t, "6", got[1].PK)
		waitAcked(t, db)
		require.Equal(t, float64(0), rr2.counter(t, "synchro_runner_transactions_total", "outcome", "duplicate"),
			"a clean stop acknowledged everything it materialized")
		err := rr2.stop(t)
		require.True(t, err == nil || errors.Is(err, context.Canceled), "%v", err)
	})
}

// A transaction far larger than one COPY batch and than the reader's buffer streams
// through in batches, while the reader keeps the connection alive with a receive
// timeout much shorter than the materialization: the applier is held inside it for
// three receive timeouts. (Without the hold, a 200 ms timeout shorter than a 570 ms
// materialization made the same point, and a loaded machine's scheduling alone
// sometimes starved the connection for 200 ms before the transaction arrived.)
func TestRunnerLargeTransaction(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		cfg.BatchRows = 500
		cfg.StandbyInterval = 200 * time.Millisecond
		cfg.ReceiveTimeout = time.Second
		rr := startRunner(t, cfg)
		waitStream(t, db)

		held, release := holdMaterialization(t, db)
		const n = 3000
		mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'o' || (g % 3), repeat('x', 100) FROM generate_series(100, 99 + $1) g`, n)
		held()
		time.Sleep(3 * cfg.ReceiveTimeout)
		release()
		eventually(t, 9*time.Second, "the large transaction", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.txn`) == 1
		})
		require.Equal(t, n, countOf(t, db, `SELECT count(*) FROM synchro.effect`))
		require.Equal(t, n, countOf(t, db, `SELECT count(DISTINCT event_ordinal) FROM synchro.effect`))
		require.Equal(t, n, countOf(t, db, `SELECT max(event_ordinal) + 1 FROM synchro.effect`))
		waitAcked(t, db)
		require.Equal(t, float64(0), rr.counter(t, "synchro_runner_transient_errors_total"),
			"no dead-connection verdict while the applier held the reader back")
		require.Equal(t, float64(n), rr.counter(t, "synchro_runner_row_events_total"))
	})
}

// A stop that arrives while a source transaction is being applied finishes that
// transaction, acknowledges it, and returns nil.
func TestRunnerStopFinishesTransactionInHand(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		cfg.BatchRows = 100
		cfg.ShutdownTimeout = 9 * time.Second
		rr := startRunner(t, cfg)
		waitStream(t, db)

		// The apply session is held inside its materialization transaction, not caught
		// there by polling (a fast materialization finished between two polls): it
		// waits with the whole transaction in hand until the stop has arrived.
		held, release := holdMaterialization(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series(100, 1099) g`)
		held()
		rr.cancel() // the stop (rr.stop without its wait)
		time.Sleep(200 * time.Millisecond)
		release()
		require.NoError(t, rr.wait(t, 10*time.Second))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.txn`), "the transaction in hand was finished")
		require.Equal(t, 1000, countOf(t, db, `SELECT count(*) FROM synchro.effect`))
		p, _ := runnerState(t, db)
		require.NotNil(t, p.Acked)
		require.Equal(t, *p.Processed, *p.Acked, "and acknowledged")
		require.Equal(t, lsnOf(t, p.Processed), slotLSN(t, db))
	})
}

package tests

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// stoppedCaughtUp runs a runner until it materialized one write and acknowledged
// everything, then stops it cleanly.
func stoppedCaughtUp(t *testing.T) (*testdb.DB, runner.Config) {
	t.Helper()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	rr := startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
	return db, cfg
}

// unpublishedWAL writes WAL that the publication does not carry and returns the WAL
// insert position after it.
func unpublishedWAL(t *testing.T, db *testdb.DB) pglogrepl.LSN {
	t.Helper()
	mustExec(t, db, `CREATE TABLE IF NOT EXISTS scratch (n int); INSERT INTO scratch SELECT generate_series(1, 100)`)
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
	l, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return l
}

// A slot advance is not durable across a crash: the slot can be behind the recorded
// acknowledgement. The runner advances it to the acknowledgement before reading WAL.
func TestRunnerStartupAdvancesSlotBehindAck(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db, cfg := stoppedCaughtUp(t)
		slot := slotLSN(t, db)
		// Only unpublished WAL lies between the slot and the new boundary, so it is an
		// honest processed and acknowledged boundary that the slot did not keep.
		ack := unpublishedWAL(t, db)
		require.Greater(t, ack, slot)
		mustExec(t, db, `UPDATE synchro.progress SET processed_end_lsn = $1::pg_lsn, acknowledged_end_lsn = $1::pg_lsn`, ack.String())

		logs := &syncLog{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		startRunner(t, cfg)
		eventually(t, 5*time.Second, "the slot to be advanced", func() bool { return slotLSN(t, db) >= ack })
		// The runner advanced the slot to exactly the acknowledgement before reading:
		// the slot's position itself may have moved on since (the runner acknowledges
		// other tests' WAL while idle), so its log says where it advanced the slot to.
		advanced := logs.lines(`slot_lsn=` + slot.String() + ` ack=` + ack.String())
		require.Len(t, advanced, 1, "%s", logs.String())
		require.Contains(t, advanced[0], "advancing it")
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		got := waitEffects(t, db, 2)
		require.Equal(t, "6", got[1].PK)
	})
}

// A slot after the processed boundary, or before generation_start, contradicts durable
// progress: the runner refuses to read WAL.
func TestRunnerStartupRefusesSlotOutsideProgress(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		t.Run("AfterProcessed", func(t *testing.T) {
			t.Parallel()
			db, cfg := stoppedCaughtUp(t)
			mustExec(t, db, `UPDATE synchro.progress SET materialized_commit_lsn = NULL,
			processed_end_lsn = generation_start_lsn, acknowledged_end_lsn = NULL`)
			before := slotLSN(t, db)
			err := startRunner(t, cfg).wait(t, 5*time.Second)
			require.ErrorIs(t, err, runner.ErrSlotMismatch)
			require.Equal(t, before, slotLSN(t, db))
		})
		t.Run("BeforeGenerationStart", func(t *testing.T) {
			t.Parallel()
			db, cfg := stoppedCaughtUp(t)
			later := unpublishedWAL(t, db)
			mustExec(t, db, `UPDATE synchro.progress SET generation_start_lsn = $1::pg_lsn,
			processed_end_lsn = $1::pg_lsn, acknowledged_end_lsn = $1::pg_lsn, materialized_commit_lsn = NULL`, later.String())
			before := slotLSN(t, db)
			err := startRunner(t, cfg).wait(t, 5*time.Second)
			require.ErrorIs(t, err, runner.ErrSlotMismatch)
			require.Equal(t, before, slotLSN(t, db))
		})
	})
}

// With nothing to materialize, keepalives carry idle boundaries: the processed
// boundary and the slot follow the WAL past writes the publication does not carry.
func TestRunnerIdleAcknowledgement(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		p := waitAcked(t, db)

		target := unpublishedWAL(t, db)
		require.Greater(t, target, lsnOf(t, p.Processed))
		eventually(t, 8*time.Second, "an idle boundary past the unpublished writes", func() bool {
			p, _ = runnerState(t, db)
			return lsnOf(t, p.Processed) >= target && p.Acked != nil && *p.Acked == *p.Processed && slotLSN(t, db) == lsnOf(t, p.Processed)
		})
		require.Greater(t, rr.counter(t, "synchro_runner_idle_boundaries_total"), float64(0))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.txn`), "idle boundaries invent no transaction")
	})
}

// Losing the apply or replication session is transient: the runner reconnects after a
// backoff, quarantines nothing, and goes on where the durable acknowledgement is.
func TestRunnerSurvivesTerminatedSessions(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)

		terminate := func() int {
			return countOf(t, db, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database()
			  AND application_name IN ('synchro-runner-apply', 'synchro-runner-replication', 'synchro-runner-ack')) x`)
		}
		// Two apply sessions (pipelined batches), the acknowledgement's, the replication one.
		require.Equal(t, 4, terminate())
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		got := waitEffects(t, db, 2)
		require.Equal(t, "6", got[1].PK)
		waitAcked(t, db)
		require.Greater(t, rr.counter(t, "synchro_runner_transient_errors_total"), float64(0))
		require.Empty(t, quarantines(t, db))
	})
}

// The claim lives on the control session: when it is gone (a network drop, a terminated
// backend), the runner stops the session in hand, claims the database again on a new
// control session and streams on.
func TestRunnerClaimsAgainWhenControlIsLost(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		before := countOf(t, db, `SELECT backend_pid FROM synchro.runner`)
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-control') x`))
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		got := waitEffects(t, db, 2)
		require.Equal(t, "6", got[1].PK)
		eventually(t, 10*time.Second, "a new claim", func() bool {
			return countOf(t, db, `SELECT backend_pid FROM synchro.runner`) != before &&
				countOf(t, db, `SELECT count(*) FROM synchro.runner WHERE state = 'streaming'`) == 1
		})
		waitAcked(t, db)
		require.Empty(t, quarantines(t, db))
		require.NoError(t, rr.stop(t))
	})
}

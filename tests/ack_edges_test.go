package tests

// From an independent review (2026-12-04) of the runner's acknowledgement, frontier and crash/restart
// semantics (ADR 001, "Slot acknowledgement"; CONTRACT.md, "The runner"). Each test
// says what it checks; a test marked "Was a bug" was red until fixed and names the rule it held the code to.

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/runproc"
)

// reviewWait polls cond every 10 ms for at most d (no floor: these tests keep their
// own budget), and reports whether it held.
func reviewWait(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reviewDone reports whether the in-process runner returned within d, and its result.
func reviewDone(rr *runningRunner, d time.Duration) (bool, error) {
	select {
	case err := <-rr.done:
		rr.stopped, rr.err = true, err
		return true, err
	case <-time.After(d):
		return false, nil
	}
}

// Was a bug (fixed). ADR 001, "Slot acknowledgement": "The worker must also reject a slot
// position after the processed boundary", and the worker must not skip a source
// transaction. The runner checks the slot in startup reconciliation (session.go,
// reconcile) on the apply connection, but the replication connection only acquires the
// slot later, at START_REPLICATION, after OpenStage, runner_message_key and the
// decoder's Open. Nothing holds the slot in between, and nothing checks it again once
// it is acquired: a slot advanced in that window (pg_replication_slot_advance by an
// operator or a tool) past a published source transaction is not refused. The walsender
// silently forwards START_REPLICATION's start position (the acknowledgement) to the
// slot's confirmed_flush_lsn ("has been already streamed, forwarding to"), so the
// transaction in between is never decoded: lost, with the runner streaming on and
// acknowledging past it. The window is made deterministic here by holding a lock on
// synchro.server_key (read by runner_message_key, after reconciliation).
//
// Fix: once START_REPLICATION has acquired the slot (no one else can move it then),
// read pg_replication_slots again and refuse (ErrSlotMismatch, fatal) unless its
// confirmed_flush_lsn is still the position reconciliation left (the start position);
// or acquire the slot before reconciling.
func TestAckEdgeSlotAdvancedAfterReconcileIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	rr := startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	// Written while no runner runs: a published source transaction after the
	// processed boundary.
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
	st, _ := runnerState(t, db)
	processed := lsnOf(t, st.Processed)

	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.server_key IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	rr = startRunner(t, cfg)
	require.True(t, reviewWait(20*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'synchro-runner-apply' AND wait_event_type = 'Lock'
			AND query LIKE '%runner_message_key%'`) == 1
	}), "the runner to wait for the message key, after reconciliation")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, runnerSlot(db)),
		"the slot is not acquired yet")

	// Another process advances the slot past the unmaterialized transaction.
	mustExec(t, db, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, runnerSlot(db))
	advanced := slotLSN(t, db)
	require.Greater(t, advanced, processed, "the slot is now after the processed boundary")
	require.NoError(t, lock.Rollback(ctx))

	// Expected: the runner refuses the slot (fatal). Observed: it streams on.
	if done, err := reviewDone(rr, 8*time.Second); done {
		require.ErrorIs(t, err, runner.ErrSlotMismatch)
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '6'`))
		return
	}
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (7, 'a')`)
	ok := reviewWait(10*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '7'`) == 1
	})
	lost := countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '6'`) == 0
	t.Fatalf("the runner accepted a slot moved after its reconciliation to %s, past the processed boundary %s: "+
		"it streams on (row 7 materialized: %v) and source transaction of row 6 was skipped: %v", advanced, processed, ok, lost)
}

// Sound (passes). A slot that an operator advanced past the processed boundary while no
// runner ran is refused at start (fatal, ErrSlotMismatch): the runner neither moves the
// slot nor materializes anything, and the skipped transaction stays unmaterialized
// rather than silently lost.
func TestAckEdgeOperatorAdvancedSlotRefused(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	rr := startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
	mustExec(t, db, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, runnerSlot(db))
	before := slotLSN(t, db)
	stBefore, _ := runnerState(t, db)

	err := startRunner(t, cfg).wait(t, 15*time.Second)
	require.ErrorIs(t, err, runner.ErrSlotMismatch)
	require.True(t, runner.IsFatal(err))
	require.Equal(t, before, slotLSN(t, db), "the slot is left where it was")
	stAfter, _ := runnerState(t, db)
	require.Equal(t, *stBefore.Processed, *stAfter.Processed)
	require.Equal(t, *stBefore.Acked, *stAfter.Acked, "nothing adopted past the processed boundary")
	require.Len(t, effects(t, db), 1)
}

// Was a bug (fixed). ADR 001, "Poison-event quarantine": a blocking poison is a source
// transaction that "cannot be decoded, validated, or materialized"; and
// runner/classify.go itself: a lost session "says nothing about a source transaction:
// it is never poison". With two apply sessions (the default) the second one is used
// only while the first has a batch in flight, so in a quiet stream it sits idle for as
// long as the quiet lasts. A server whose sessions have idle_session_timeout (a common
// setting, here given in the runner's URL only) ends it with FATAL 57P05
// (idle_session_timeout). The next burst stages its first COPY there while a batch is
// in flight on the first session: the error is a *pgconn.PgError whose SQLSTATE
// Classify does not know (IsTransientSQLState lists 57P01..57P03 only), so it is
// judged Poison "materialize_57p05", and since the failing transaction was the batch's
// only (still open) one, it is quarantined at once on the first (live) session: a good
// source transaction blocks the stream until an operator retries it (and a retry
// after the next quiet fails the same way). By the same code, 25P03
// (idle_in_transaction_session_timeout) and, on PostgreSQL 17, 25P04
// (transaction_timeout) would be judged Poison too (not exercised here). Timing: the
// first apply session stays alive through the quiet because the heartbeats' WAL brings
// idle boundaries (runner_idle) on it; the log line "the idle apply session ended"
// says the scenario was reached.
//
// Fix: judge every error with severity FATAL or PANIC (the session is gone), and
// 57P05/25P03/25P04, Transient; and pin idle_session_timeout = 0 and
// idle_in_transaction_session_timeout = 0 in the runner's session parameters.
func TestAckEdgeIdleSessionTimeoutIsNoPoison(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	sep := "?"
	if strings.Contains(cfg.DatabaseURL, "?") {
		sep = "&"
	}
	// Only the runner's sessions: the control session beats every 250 ms, the first
	// apply session records idle boundaries (the heartbeats write WAL), the second
	// apply session and the acknowledgement's idle.
	cfg.DatabaseURL += sep + "options=-c%20idle_session_timeout%3D2000"
	cfg.BatchRows = 10
	// Ticks (and with them acknowledgements on the acknowledgement's session, idle too)
	// far apart, so that the staged batch meets its dead session first.
	cfg.PollInterval = 5 * time.Second
	rr := startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	release := holdAtRow(t, db, 500, false)

	// The quiet: the idle sessions of the runner end (its first apply session lives on;
	// a runner that pins idle_session_timeout = 0 keeps them all).
	ended := reviewWait(6*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'synchro-runner-apply'`) == 1
	})
	t.Logf("the idle apply session ended: %v; transient errors so far: %v", ended,
		rr.counter(t, "synchro_runner_transient_errors_total"))

	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (500, 'a')`)
	require.True(t, reviewWait(15*time.Second, func() bool { return heldAt(t, db, 500) != 0 }), "row 500's batch in flight")
	// A 50-row transaction: its first COPY (10 rows) goes to the other apply session.
	mustExec(t, db, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series(1000, 1049) g`)
	time.Sleep(time.Second)
	release()

	require.True(t, reviewWait(20*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 BETWEEN 1000 AND 1049`) == 50 ||
			len(quarantines(t, db)) > 0
	}), "the burst to be materialized")
	require.Empty(t, quarantines(t, db), "a session the server ended for idleness quarantined a good source transaction")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '500'`))
}

// Sound (passes). A runner whose sessions are terminated one at a time
// (pg_terminate_backend) while a batch is in flight on the first apply session (held
// at row 500) and the next one is staged on the second: the first apply session, the
// second, the acknowledgement's, the control session (the claim) and the replication
// connection. During the hold neither the slot nor the recorded acknowledgement passes
// row 500's source transaction (status updates carry only the durable boundary);
// afterwards every row has exactly one effect, every source transaction one ledger
// row, nothing is quarantined, and the slot, the acknowledgement and the processed
// boundary meet again.
func TestAckEdgeTerminatedSessionMidBatch(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"apply-in-flight", "apply-staged", "synchro-runner-ack", "synchro-runner-control",
		"synchro-runner-replication"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			db := runnerSetup(t)
			cfg := testRunnerConfig(t, db)
			cfg.BatchRows = 10
			cfg.StandbyInterval = 200 * time.Millisecond
			cfg.ReceiveTimeout = 2 * time.Second
			startRunner(t, cfg)
			waitStream(t, db)
			mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
			waitEffects(t, db, 1)
			waitAcked(t, db)
			release := holdAtRow(t, db, 500, false)
			from := currentLSN(t, db)

			mustExec(t, db, `INSERT INTO items (id, owner) VALUES (500, 'a')`)
			hi := currentLSN(t, db)
			var held int
			require.True(t, reviewWait(15*time.Second, func() bool { held = heldAt(t, db, 500); return held != 0 }))
			mustExec(t, db, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series(1000, 1049) g`)
			for i := 200; i < 205; i++ {
				mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
			}
			time.Sleep(500 * time.Millisecond) // the next batch staged on the other session

			var pid int
			switch target {
			case "apply-in-flight":
				pid = held
			case "apply-staged":
				pid = countOf(t, db, `SELECT coalesce(min(pid), 0) FROM pg_stat_activity WHERE datname = current_database()
					AND application_name = 'synchro-runner-apply' AND pid <> $1`, held)
			default:
				pid = countOf(t, db, `SELECT coalesce(min(pid), 0) FROM pg_stat_activity WHERE datname = current_database()
					AND application_name = $1`, target)
			}
			require.NotZero(t, pid, "the %s session", target)
			// Sampled while held: the slot and the acknowledgement stay before row 500's commit.
			sample := func() {
				st, _ := runnerState(t, db)
				require.Less(t, slotLSN(t, db), hi, "the slot passed a source transaction not durable")
				require.Less(t, lsnOf(t, st.Acked), hi)
				require.LessOrEqual(t, lsnOf(t, st.Acked), lsnOf(t, st.Processed))
			}
			sample()
			mustExec(t, db, `SELECT pg_terminate_backend($1)`, pid)
			for range 20 {
				time.Sleep(50 * time.Millisecond)
				if countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()) == 0 {
					sample()
				}
			}
			release()

			require.True(t, reviewWait(30*time.Second, func() bool {
				return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 200`) >= 56
			}), "every row of the workload")
			require.Zero(t, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`),
				"no row materialized twice")
			require.Equal(t, 56, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 200`))
			require.Equal(t, 7, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()))
			require.Equal(t, 56, countOf(t, db, `SELECT count(*) FROM synchro.event e WHERE e.commit_lsn > $1::pg_lsn`, from.String()))
			require.Empty(t, quarantines(t, db))
			waitAcked(t, db)
		})
	}
}

// Sound (passes). Two runners started at the same moment on one database: exactly one
// claims it, the other returns ErrAlreadyRunning without creating or touching
// anything, and each write is materialized once.
func TestAckEdgeTwoRunnersAtOnce(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	a := testRunnerConfig(t, db)
	b := testRunnerConfig(t, db)
	b.Owner = "second"
	ra, rb := startRunner(t, a), startRunner(t, b)
	var loser *runningRunner
	require.True(t, reviewWait(20*time.Second, func() bool {
		for _, r := range []*runningRunner{ra, rb} {
			if done, err := reviewDone(r, time.Millisecond); done {
				require.ErrorIs(t, err, runner.ErrAlreadyRunning)
				loser = r
				return true
			}
		}
		return false
	}), "one of two runners started at once refuses")
	waitStream(t, db)
	for i := 5; i < 10; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
	}
	waitEffects(t, db, 5)
	waitAcked(t, db)
	require.Equal(t, 5, countOf(t, db, `SELECT count(*) FROM synchro.txn`))
	winner := ra
	if loser == ra {
		winner = rb
	}
	require.Equal(t, float64(5), winner.counter(t, "synchro_runner_transactions_total", "outcome", "materialized"))
	require.Equal(t, float64(0), loser.counter(t, "synchro_runner_transactions_total", "outcome", "materialized"))
}

// Sound (passes). A restart storm: `synchro run` is SIGKILLed every 150-350 ms from
// outside (wherever it is: claiming, reconciling, staging, in a materialization call,
// between the slot's confirmation and runner_ack) while a writer commits single-row
// and 20-row transactions. Sampled throughout, the slot never passes the processed
// boundary, nor the acknowledgement; once a runner is left alone every written row
// has exactly one event and one effect and every source transaction one ledger row.
func TestAckEdgeRestartStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	p := startProc(t, bin, db, "")
	waitStream(t, db)
	waitAcked(t, db)
	require.NoError(t, p.Stop(10*time.Second))
	from := currentLSN(t, db)

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var rows, txns atomic.Int64
	wg.Go(func() {
		next := int64(1000)
		for i := 0; wctx.Err() == nil; i++ {
			n := int64(1)
			if i%5 == 4 {
				n = 20
			}
			// Not under wctx: an insert canceled by the context could still commit
			// after the count below (one row more materialized than counted).
			if _, err := db.Pool.Exec(ctx, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series($1::int8, $2::int8) g`,
				next, next+n-1); err == nil {
				rows.Add(n)
				txns.Add(1)
				next += n
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	// The slot, the acknowledgement and the processed boundary only move forward, and
	// the two checks are taken from reads in opposite orders: the acknowledgement read
	// before the slot (the runner confirms the slot, then records runner_ack: read
	// after the slot, an acknowledgement recorded between the two reads passes the
	// older slot value without any rule broken), the processed boundary after it.
	sample := func() {
		before, _ := runnerState(t, db)
		slot := slotLSN(t, db)
		after, _ := runnerState(t, db)
		require.LessOrEqual(t, slot, lsnOf(t, after.Processed), "the slot passed the processed boundary")
		require.LessOrEqual(t, lsnOf(t, before.Acked), slot, "the recorded acknowledgement passed the slot")
	}
	rnd := rand.New(rand.NewPCG(7, 11))
	deadline := time.Now().Add(7 * time.Second)
	kills := 0
	for time.Now().Before(deadline) {
		p := startProc(t, bin, db, "")
		end := time.Now().Add(time.Duration(150+rnd.IntN(200)) * time.Millisecond)
		for time.Now().Before(end) {
			sample()
			time.Sleep(25 * time.Millisecond)
		}
		if !p.Exited() {
			p.Kill()
			kills++
		}
	}
	stop()
	wg.Wait()
	// What was written, counted in the table (rows are only inserted, so each writer
	// transaction's rows share one xmin): every insert has returned here.
	written := countOf(t, db, `SELECT count(*) FROM items WHERE id >= 1000`)
	writtenTxns := countOf(t, db, `SELECT count(DISTINCT xmin::text) FROM items WHERE id >= 1000`)
	require.GreaterOrEqual(t, written, int(rows.Load()))
	require.GreaterOrEqual(t, writtenTxns, int(txns.Load()))
	t.Logf("%d kills, %d transactions, %d rows written, %d materialized during the storm", kills, writtenTxns, written,
		countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`))

	p = startProc(t, bin, db, "")
	require.True(t, reviewWait(40*time.Second, func() bool {
		sample()
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`) >= written
	}), "every written row materialized")
	waitAcked(t, db)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`),
		"no duplicate effect")
	require.Equal(t, written, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`))
	require.Equal(t, written, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE commit_lsn > $1::pg_lsn`, from.String()))
	require.Equal(t, writtenTxns, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()))
	require.Empty(t, quarantines(t, db))
	require.NoError(t, p.Stop(10*time.Second))
}

// Was a bug (fixed). ADR 001 rejects a slot position that contradicts durable progress (before
// the generation start, after the processed boundary); this one never does. Runner A's
// control session (the claim) is lost, and until its next heartbeat notices (up to
// --heartbeat-interval, 5 s by default, plus the 5 s heartbeat budget) A goes on
// materializing and moving the slot: nothing fences a runner without the claim (its
// apply and replication sessions never check it). Runner B claims the database at
// once and reconciles while the slot is still active, held by A's walsender:
// reconcile reads durable progress, then the slot, adopts it (runner_ack), then reads
// both again, each in its own statement, while A moves them. B then stops with the
// fatal ErrSlotMismatch ("slot != acknowledgement after reconciliation", or "slot is
// after the processed boundary"), although the slot never contradicted durable
// progress. Unforced, under a write load, this happened in 3 of 3 trials; here the
// interleaving is made deterministic with row and table locks (the progress row holds
// B's adoption, synchro.stream_generation holds its second read of runner_state while
// A materializes one more transaction).
//
// Fix: reconcile only a slot no walsender holds (slot.Active: errSlotActive, transient,
// before any decision, not only before an advance); better still, fence the apply
// sessions with the claim so that a runner that lost it writes nothing.
func TestAckEdgeClaimantRefusesSlotMovedByClaimlessRunner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	a := testRunnerConfig(t, db)
	a.HeartbeatInterval = 30 * time.Second // A does not notice the lost claim during the test
	a.PollInterval = 30 * time.Second      // and records no acknowledgement: its slot runs ahead of it
	ra := startRunner(t, a)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	require.True(t, reviewWait(10*time.Second, func() bool {
		st, _ := runnerState(t, db)
		return slotLSN(t, db) > lsnOf(t, st.Acked)
	}), "the slot ahead of the recorded acknowledgement")

	hold := func(sql string) pgx.Tx {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		_, err = tx.Exec(ctx, sql)
		require.NoError(t, err)
		return tx
	}
	progress := hold(`SELECT 1 FROM synchro.progress FOR UPDATE`)
	// A's claim goes with its control session, once that backend has exited (A notices
	// only at its next heartbeat, seconds later).
	var controlPid int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-control'`).Scan(&controlPid))
	mustExec(t, db, `SELECT pg_terminate_backend($1)`, controlPid)
	require.True(t, reviewWait(10*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, controlPid) == 0
	}), "A's control session to end")
	b := testRunnerConfig(t, db)
	b.Owner = "second"
	rb := startRunner(t, b)
	adopting := reviewWait(10*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'synchro-runner-apply' AND wait_event_type = 'Lock' AND query LIKE '%runner_ack%'`) == 1
	})
	if adopting {
		// B adopts the slot A moved; its second look at durable progress waits while A,
		// claimless, materializes one more transaction and the slot follows.
		st, _ := runnerState(t, db)
		generation := hold(`LOCK TABLE synchro.stream_generation IN ACCESS EXCLUSIVE MODE`)
		before := slotLSN(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		require.NoError(t, progress.Rollback(ctx))
		waiting := reviewWait(5*time.Second, func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND application_name = 'synchro-runner-apply' AND wait_event_type = 'Lock' AND query LIKE '%runner_state%'`) == 1
		})
		moved := reviewWait(5*time.Second, func() bool { return slotLSN(t, db) > before })
		t.Logf("B adopted %s (processed %s), reads progress again: %v; the slot moved on to %s: %v; "+
			"row 6 materialized by the runner without the claim: %v", before, *st.Processed, waiting, slotLSN(t, db), moved,
			countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '6'`) == 1)
		require.NoError(t, generation.Rollback(ctx))
	} else {
		require.NoError(t, progress.Rollback(ctx))
	}

	if done, err := reviewDone(rb, 3*time.Second); done {
		t.Fatalf("the claiming runner stopped on a slot that never contradicted durable progress: %v", err)
	}
	require.NoError(t, ra.stop(t)) // A stops; B takes the slot over
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (7, 'a')`)
	require.True(t, reviewWait(15*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '7'`) == 1
	}), "the claiming runner streams once the other one is gone")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`))
}

// Sound (passes). A clean stop under a write load (Run's context canceled, as SIGTERM
// does): Run returns nil, and what it materialized is acknowledged: the slot, the
// recorded acknowledgement and the processed boundary are equal (the final
// acknowledgement), and the next runner replays nothing (no duplicate outcome) and
// materializes each later transaction once.
func TestAckEdgeCleanStopUnderLoadIsAcknowledged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.PollInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var rows atomic.Int64
	wg.Go(func() {
		next := int64(1000)
		for wctx.Err() == nil {
			// Not under wctx: a canceled insert could commit after the count below.
			if _, err := db.Pool.Exec(ctx, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series($1::int8, $1 + 49) g`, next); err == nil {
				rows.Add(50)
				next += 50
			}
		}
	})
	time.Sleep(1500 * time.Millisecond)
	// Stopped while it materializes: on a loaded machine the first batch came later than
	// 1.5 s once, and a runner that had processed nothing has nothing to acknowledge.
	eventually(t, 60*time.Second, "the runner materializes the writes", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`) > 0
	})
	require.NoError(t, rr.stop(t))
	stop()
	wg.Wait()
	st, _ := runnerState(t, db)
	require.NotNil(t, st.Acked)
	require.Equal(t, *st.Processed, *st.Acked, "a clean stop records the final acknowledgement")
	require.Equal(t, lsnOf(t, st.Processed), slotLSN(t, db))
	waitRunnerGone(t, db)

	// The rows written, counted in the table: every insert has returned here.
	written := countOf(t, db, `SELECT count(*) FROM items WHERE id >= 1000`)
	require.GreaterOrEqual(t, written, int(rows.Load()))
	rr2 := startRunner(t, cfg)
	require.True(t, reviewWait(30*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`) >= written
	}))
	waitAcked(t, db)
	require.Equal(t, written, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`))
	require.Equal(t, float64(0), rr2.counter(t, "synchro_runner_transactions_total", "outcome", "duplicate"))
}

// Sound (passes). A source transaction large enough that the walsender spills it to
// disk (logical_decoding_work_mem = 64 kB on the runner's sessions) is cut by the
// process's death in the middle of its staging (SIGKILL at the fifth COPY): nothing of
// it is durable and neither the slot nor the acknowledgement passes its commit; the
// next runner decodes it again from the spilled slot and materializes it once.
func TestAckEdgeSpilledTransactionDeathMidBatch(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t, runproc.FaultTag)
	db := runnerSetup(t)
	url := db.URL + "&options=-c%20logical_decoding_work_mem%3D64"
	if !strings.Contains(db.URL, "?") {
		url = db.URL + "?options=-c%20logical_decoding_work_mem%3D64"
	}
	start := func(spec string) *runproc.Proc {
		return runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: url, Slot: runnerSlot(db), Fault: spec})
	}
	p := start(fault.Spec{Point: fault.Copy, N: 5}.String())
	waitStream(t, db)
	from := currentLSN(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'a', repeat('x', 50) FROM generate_series(1000, 20999) g`)
	to := currentLSN(t, db)
	requireFaultDeath(t, p, fault.Copy)

	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`))
	st, _ := runnerState(t, db)
	require.Less(t, lsnOf(t, st.Processed), to)
	require.Less(t, slotLSN(t, db), to, "the slot stays before the transaction cut by the death")
	require.Greater(t, countOf(t, db, `SELECT coalesce(sum(spill_txns), 0)::int FROM pg_stat_replication_slots WHERE slot_name = $1`,
		runnerSlot(db)), 0, "the walsender spilled the transaction to disk")

	waitRunnerGone(t, db)
	p = start("")
	require.True(t, reviewWait(40*time.Second, func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`) >= 20000
	}), "the spilled transaction materialized")
	waitAcked(t, db)
	require.Equal(t, 20000, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk::int8 >= 1000`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM (SELECT pk FROM synchro.effect GROUP BY pk HAVING count(*) > 1) d`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, from.String()))
	require.Equal(t, float64(0), procCounter(t, p, "synchro_runner_transactions_total", "outcome", "duplicate"))
	require.NoError(t, p.Stop(10*time.Second))
}

// TestAckEdgeSynchronousCommitOffIsRaisedToLocal: ADR 001 acknowledges the slot only
// after the batch's commit is durable. Under synchronous_commit = off a commit returns
// before its WAL is flushed: a runner that inherited "off" from the database, its role
// or the URL would report the slot past a materialization a server crash then loses,
// and the restart would find the slot after the processed boundary (fatal). Every
// runner session raises "off" to "local" (the local flush the ADR asks for) and keeps
// any stronger setting the database chose (a synchronous standby's remote_write stays).
func TestAckEdgeSynchronousCommitOffIsRaisedToLocal(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, url, database, want string
	}{
		{name: "database off", database: "off", want: "local"},
		{name: "url off", url: "synchronous_commit=off", want: "local"},
		{name: "database remote_write kept", database: "remote_write", want: "remote_write"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := runnerSetup(t)
			if c.database != "" {
				mustExec(t, db, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET synchronous_commit = `+c.database)
			}
			cfg := testRunnerConfig(t, db)
			if c.url != "" {
				sep := "?"
				if strings.Contains(cfg.DatabaseURL, "?") {
					sep = "&"
				}
				cfg.DatabaseURL += sep + c.url
			}
			logs := &syncLog{}
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			startRunner(t, cfg)
			waitStream(t, db)
			mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
			waitEffects(t, db, 1)
			var started string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `msg="replication started"`) {
					started = line
				}
			}
			require.NotEmpty(t, started, "runner log:\n%s", logs.String())
			require.Contains(t, started, "synchronous_commit="+c.want)
		})
	}
}

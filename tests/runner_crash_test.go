package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// Crash tests on a real `synchro run` process: built with the synchrofaults tag, it
// kills itself with SIGKILL at a named fault point (internal/fault), so nothing of the
// dead process runs after the point: no deferred cleanup, no release, no final ack.

// startProc runs `synchro run` on db's slot, armed with spec ("" for none), decoding
// with the decoder eachDecoder chose (SYNCHRO_DECODER; pgoutput outside it), with
// extra flags args.
func startProc(t *testing.T, bin string, db *testdb.DB, spec string, args ...string) *runproc.Proc {
	t.Helper()
	return runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db), Fault: spec,
		Args: args, Env: []string{"SYNCHRO_DECODER=" + decoderOf(t)}})
}

// requireStreamPlugin checks the output plugin the stream recorded at its creation.
func requireStreamPlugin(t *testing.T, db *testdb.DB, plugin string) {
	t.Helper()
	var got string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT plugin FROM synchro.stream_generation WHERE state = 'active'`).Scan(&got))
	require.Equal(t, plugin, got)
}

// requireFaultDeath waits for p to die by SIGKILL at point.
func requireFaultDeath(t *testing.T, p *runproc.Proc, point fault.Point) {
	t.Helper()
	require.True(t, p.Wait(15*time.Second), "the runner did not die at %s", point)
	require.True(t, p.Killed(), "exit: %s\n%s", p.Exit(), p.Logs())
	require.Equal(t, point, p.FaultReached())
}

// procCounter reads a counter of p's /metrics, waiting for the endpoint.
func procCounter(t *testing.T, p *runproc.Proc, name string, labels ...string) float64 {
	t.Helper()
	v, _ := p.Metric(name, labels...)
	return v
}

// The runner dies right after a materialization committed, before the slot heard of
// it. The restarted runner re-decodes that transaction, materialize reports it as a
// duplicate, and the effects and the consumer groups' change record are exactly the
// same: a group reads each transaction once.
func TestRunnerDeathAfterMaterializeCommit(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		bin := runproc.BuildT(t, runproc.FaultTag)
		db := runnerSetup(t)
		// The first materialization commit passes, the second is the death.
		p := startProc(t, bin, db, fault.Spec{Point: fault.AfterCommit, N: 2}.String())
		waitStream(t, db)
		requireStreamPlugin(t, db, decoderOf(t)) // SYNCHRO_DECODER chose it
		mustExec(t, db, `SELECT synchro.create_consumer_group('replayed')`)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		waitAcked(t, db)

		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		requireFaultDeath(t, p, fault.AfterCommit)
		before := effects(t, db)
		require.Len(t, before, 2)
		changesBefore := tableRows(t, db, "change")
		st, _ := runnerState(t, db)
		var lastCommit string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT max(commit_lsn)::text FROM synchro.txn`).Scan(&lastCommit))
		require.Less(t, lsnOf(t, st.Acked), lsnOf(t, st.Processed), "materialized, not acknowledged")
		require.LessOrEqual(t, slotLSN(t, db), lsnOf(t, &lastCommit), "the slot never heard of the dead runner's last transaction")

		waitRunnerGone(t, db)
		// --decoder wins over SYNCHRO_DECODER (here naming the other decoder).
		other := "wal2json"
		if decoderOf(t) == "wal2json" {
			other = "pgoutput"
		}
		p2 := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: runnerSlot(db),
			Args: []string{"--decoder", decoderOf(t)}, Env: []string{"SYNCHRO_DECODER=" + other}})
		// The restarted runner may report the processed boundary before the replayed
		// transaction reaches it; the replay still comes (decoding starts at the slot).
		eventually(t, 10*time.Second, "the replayed transaction", func() bool {
			return procCounter(t, p2, "synchro_runner_transactions_total", "outcome", "duplicate") == 1
		})
		waitAcked(t, db)
		require.Equal(t, before, effects(t, db), "replay created nothing")
		require.Equal(t, changesBefore, tableRows(t, db, "change"), "replay added no change record")
		require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.txn`))

		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (7, 'a')`)
		after := waitEffects(t, db, 3)
		require.Equal(t, before, after[:2])
		require.Equal(t, "7", after[2].PK)
		waitChangeTxns(t, db, 3)
		c := consumerConn(t, db)
		tok, err := acquireLease(c, "replayed", "me", 60)
		require.NoError(t, err)
		r, err := readChanges(c, "replayed", tok, 100, 1<<20)
		require.NoError(t, err)
		require.Equal(t, txnPositions(t, db, nil), r.positions(), "each transaction once, in order")
		require.NoError(t, p2.Stop(10*time.Second))
	})
}

// tableRows is every row of a synchro table as canonical JSON text, in a stable order.
func tableRows(t *testing.T, db *testdb.DB, table string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY to_jsonb(x)::text), '[]')::text FROM synchro.%s x`,
		pgx.Identifier{table}.Sanitize())).Scan(&s))
	return s
}

// The runner dies after the slot confirmed a boundary and before runner_ack recorded
// it. The restarted runner adopts the slot position (it is at or before the processed
// boundary) and goes on without replaying anything.
func TestRunnerDeathBetweenSlotAckAndRecord(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		bin := runproc.BuildT(t, runproc.FaultTag)
		db := runnerSetup(t)
		p := startProc(t, bin, db, "")
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		waitAcked(t, db)
		require.NoError(t, p.Stop(10*time.Second))
		waitRunnerGone(t, db)

		// Written while no runner runs: the first boundary the next runner records is
		// usually this transaction's end, so its first after-slot-ack reach is the death
		// after materializing it. On a loaded machine it can be an idle boundary in the
		// other tests' WAL before it (the walsender's keepalives while it reads that WAL
		// come before the transaction is decoded): the same death, before the
		// transaction is materialized.
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
		p = startProc(t, bin, db, fault.Spec{Point: fault.AfterSlotAck, N: 1}.String())
		requireFaultDeath(t, p, fault.AfterSlotAck)
		before := effects(t, db)
		require.Contains(t, []int{1, 2}, len(before))
		t.Logf("died with %d of 2 transactions materialized", len(before))
		st, _ := runnerState(t, db)
		slot := slotLSN(t, db)
		require.Less(t, lsnOf(t, st.Acked), slot, "the slot is ahead of the recorded acknowledgement")
		require.LessOrEqual(t, slot, lsnOf(t, st.Processed))

		waitRunnerGone(t, db)
		p2 := startProc(t, bin, db, "")
		waitAcked(t, db)
		st2, _ := runnerState(t, db)
		require.GreaterOrEqual(t, lsnOf(t, st2.Acked), slot)
		require.Equal(t, before, waitEffects(t, db, 2)[:len(before)], "what was materialized stays as it was")

		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (7, 'a')`)
		after := waitEffects(t, db, 3)
		require.Equal(t, before, after[:len(before)])
		require.Equal(t, float64(0), procCounter(t, p2, "synchro_runner_transactions_total", "outcome", "duplicate"),
			"nothing before the adopted slot position is decoded again")
		require.Contains(t, p2.Logs(), "slot after the durable acknowledgement: adopting it")
		require.NoError(t, p2.Stop(10*time.Second))
	})
}

// A runner whose control backend is terminated claims the database again and is ready
// again; a runner process that dies leaves its row claiming "streaming", and readiness
// sees that nothing holds the claim.
func TestReadinessWorkerKilled(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t, runproc.FaultTag)
	db := runnerSetup(t)
	p := startProc(t, bin, db, fault.Spec{Point: fault.AfterCommit, N: 1}.String())
	waitStream(t, db)
	waitReady(t, db)
	mustExec(t, db, `SELECT pg_terminate_backend(backend_pid) FROM synchro.runner`)
	waitReady(t, db)

	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	requireFaultDeath(t, p, fault.AfterCommit)
	waitFailing(t, db, "worker")
	// The dead runner's sessions end on the server a moment after the process: the
	// claim (a session advisory lock) goes with its control session.
	eventually(t, 10*time.Second, "the claim to go with the dead runner's sessions", func() bool {
		rows, _ := readinessOf(t, db)
		return strings.Contains(checkRow(rows, "worker").Detail, "state=streaming claim_held=false backend_alive=false")
	})
}

// The production binary (no synchrofaults tag) carries no fault point: SYNCHRO_FAULT
// arms nothing, the runner materializes and acknowledges as usual and stops cleanly.
func TestProductionBinaryIgnoresFaultSwitch(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	for _, pt := range fault.Points {
		p := startProc(t, bin, db, fault.Spec{Point: pt, N: 1}.String())
		waitStream(t, db)
		// Materialized by this process (it waits for the transaction's xid), then acknowledged.
		write(t, db, `INSERT INTO items (id, owner) VALUES ((SELECT coalesce(max(id), 0) + 1 FROM items), 'a')`)
		waitAcked(t, db)
		require.False(t, p.Exited(), "%s: %s\n%s", pt, p.Exit(), p.Logs())
		require.NoError(t, p.Stop(10*time.Second), pt)
		require.Empty(t, p.FaultReached())
		waitRunnerGone(t, db)
	}
	require.Equal(t, len(fault.Points), countOf(t, db, `SELECT count(*) FROM synchro.txn`))
}

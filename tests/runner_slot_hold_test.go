package tests

import (
	"context"
	"time"

	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// Issue 9 item 8(d): the slot must not pass a transaction the runner received but has
// not materialized, however many standby status updates it sends meanwhile (a runner
// that reported its received position as flushed would lose that transaction on a
// crash). Materialization is held by a real lock: a transaction holds synchro.txn in
// EXCLUSIVE mode (reads pass, the runner's insert of the transaction's replay identity
// waits), so the runner has received the source transaction and cannot materialize it.
func TestRunnerSlotHoldsBehindUnmaterialized(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.StandbyInterval = 200 * time.Millisecond
	startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)

	locker, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer locker.Release()
	lockTx, err := locker.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lockTx.Rollback(ctx) }()
	_, err = lockTx.Exec(ctx, `LOCK TABLE synchro.txn IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	var lockerPID int
	require.NoError(t, lockTx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockerPID))

	xid := commitXid(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
	// Received: the runner is materializing it, waiting for the lock.
	eventually(t, 10*time.Second, "the runner to wait for synchro.txn", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks
			WHERE NOT granted AND relation = 'synchro.txn'::regclass AND pid <> $1
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, lockerPID) > 0
	})

	// The walsender's reply_time changes with every standby status update the runner
	// sends: sample the slot until more than two updates arrived while the transaction
	// is held (counted in updates, not in time).
	replyTime := func() *time.Time {
		var rt *time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT r.reply_time FROM pg_stat_replication r
			  JOIN pg_replication_slots s ON s.active_pid = r.pid
			 WHERE s.slot_name = $1`, runnerSlot(db)).Scan(&rt))
		return rt
	}
	var samples []pglogrepl.LSN
	seen := map[time.Time]bool{}
	var first *time.Time
	eventually(t, 20*time.Second, "three standby status updates during the hold", func() bool {
		samples = append(samples, slotLSN(t, db))
		if rt := replyTime(); rt != nil {
			if first == nil {
				first = rt
			}
			if !rt.Equal(*first) {
				seen[*rt] = true
			}
		}
		return len(seen) >= 3
	})
	samples = append(samples, slotLSN(t, db))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, xid),
		"still unmaterialized after the updates")

	require.NoError(t, lockTx.Rollback(ctx))
	waitXid(t, db, xid)
	var commit string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT commit_lsn::text FROM synchro.txn WHERE xid % 4294967296 = $1`, xid).Scan(&commit))
	commitLSN := lsnOf(t, &commit)
	for i, s := range samples {
		require.LessOrEqual(t, s, commitLSN, "sample %d of %d: the slot passed a received, unmaterialized transaction", i, len(samples))
	}
	p := waitAcked(t, db)
	require.Greater(t, lsnOf(t, p.Acked), commitLSN, "once materialized, the slot moves past it")
}

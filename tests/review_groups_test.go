package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Review of consumer groups (CONTRACT.md "Consumer groups"): scenarios where a group
// could lose committed changes.

// operatorConn is a session in role synchro_operator.
func reviewOperatorConn(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = c.Exec(ctx, `SET ROLE synchro_operator`)
	require.NoError(t, err)
	return c
}

// compact under REPEATABLE READ: the snapshot of compact's statement is taken before
// it waits for the consumer-group floor lock, so a group created at `earliest` while
// compact waits is not seen by the floor, and compact deletes the changes the new
// group has not acknowledged. "compact never removes a transaction an active group
// has not acknowledged."
func TestReviewGroupsCompactRepeatableReadMissesNewGroup(t *testing.T) {
	t.Parallel()
	db := groupsSetup(t)
	ctx := context.Background()
	for i := 10; i < 13; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES ($1, 'a', $2)`, i, i)
	}
	waitChangeTxns(t, db, 3)
	all := txnPositions(t, db, nil)

	// The group is created in a transaction that holds the floor lock (exclusive).
	c := consumerConn(t, db)
	ctx2, err := c.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = ctx2.Rollback(ctx) }()
	_, err = ctx2.Exec(ctx, `SELECT synchro.create_consumer_group('racer')`)
	require.NoError(t, err)

	// compact in a REPEATABLE READ transaction waits for it.
	op := reviewOperatorConn(t, db.URL)
	otx, err := op.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = otx.Rollback(ctx) }()
	done := make(chan error, 1)
	var res string
	go func() { done <- otx.QueryRow(ctx, `SELECT synchro.compact('0')::text`).Scan(&res) }()
	eventually(t, 10*time.Second, "compact to wait on the floor lock", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 1
	})
	require.NoError(t, ctx2.Commit(ctx))
	require.NoError(t, <-done)
	require.NoError(t, otx.Commit(ctx))
	t.Logf("compact: %s", res)

	tok, err := acquireLease(c, "racer", "me", 60)
	require.NoError(t, err)
	r, err := readChanges(c, "racer", tok, 100, 1<<20)
	if err != nil {
		requireSQLState(t, err, "SY409") // at least not silent
		return
	}
	require.Equal(t, all, r.positions(),
		"a group created at earliest before compact took the floor lock lost its unacknowledged changes, silently")
}

// A released group (release_consumer_retention) must read SY409 once compaction passed
// its checkpoint. read_changes checks the horizon in one statement and reads the
// changes in later ones (READ COMMITTED: a new snapshot each): a compaction that commits
// in between deletes the first transactions of the read, which then hands out only the
// later ones, without SY409, and the ack of the last one skips the deleted ones.
func TestReviewGroupsReleasedReadRacesCompact(t *testing.T) {
	t.Parallel()
	db := groupsSetup(t)
	ctx := context.Background()
	for _, g := range []string{"rel", "hold"} {
		mustExec(t, db, `SELECT synchro.create_consumer_group($1)`, g)
	}
	for i := 10; i < 13; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES ($1, 'a', $2)`, i, i)
	}
	waitChangeTxns(t, db, 3)
	all := txnPositions(t, db, nil)

	c := consumerConn(t, db)
	// hold acknowledges two transactions: compaction may delete those two only.
	ht, err := acquireLease(c, "hold", "me", 600)
	require.NoError(t, err)
	hr, err := readChanges(c, "hold", ht, 2, 1<<20)
	require.NoError(t, err)
	require.NoError(t, ackPosition(c, "hold", ht, hr.Transactions[1].Position))

	op := reviewOperatorConn(t, db.URL)
	_, err = op.Exec(ctx, `SELECT synchro.release_consumer_retention('rel', 'rel')`)
	require.NoError(t, err)

	rc := consumerConn(t, db)
	rt, err := acquireLease(rc, "rel", "me", 600)
	require.NoError(t, err)

	// Hold read_changes between its horizon check / transaction list and the read of
	// the changes (the statement that joins synchro.relation).
	locker, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, `LOCK TABLE synchro.relation IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	type result struct {
		r   groupRead
		raw string
		err error
	}
	got := make(chan result, 1)
	go func() {
		var raw string
		err := rc.QueryRow(ctx, `SELECT synchro.read_changes('rel', $1, 100, 1048576)::text`, rt).Scan(&raw)
		var r groupRead
		if err == nil {
			_ = json.Unmarshal([]byte(raw), &r)
		}
		got <- result{r, raw, err}
	}()
	eventually(t, 10*time.Second, "read_changes to wait on synchro.relation", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'relation' AND NOT l.granted AND l.relation = 'synchro.relation'::regclass
			  AND a.query LIKE '%read_changes%'`) == 1
	})
	var res string
	require.NoError(t, op.QueryRow(ctx, `SELECT synchro.compact('0')::text`).Scan(&res))
	t.Logf("compact: %s", res)
	require.NoError(t, locker.Rollback(ctx))

	out := <-got
	if out.err != nil {
		requireSQLState(t, out.err, "SY409")
		return
	}
	t.Logf("read: %s", out.raw)
	if len(out.r.Transactions) > 0 {
		last := out.r.Transactions[len(out.r.Transactions)-1].Position
		t.Logf("ack of %s: %v", last, ackPosition(rc, "rel", rt, last))
	}
	require.Equal(t, all, out.r.positions(),
		"the released group's read skipped transactions compaction deleted mid-read, without SY409")
}

// A group created before the stream existed starts at the first stream generation's
// start (docs/sql/create_consumer_group.md) and holds back compaction of that
// generation (synchro._consumer_floor counts it). If its first leased call comes only
// after a stream reset, synchro._consumer_leased adopts the *new* generation's start:
// the first generation's transactions, never acknowledged, are skipped without the
// SY409 every other group of that generation gets.
func TestReviewGroupsPreStreamGroupAcrossReset(t *testing.T) {
	// Not parallel: a reset's exported snapshot waits for every xid-holding transaction.
	db := runnerSetup(t)
	mustExec(t, db, `
		CREATE TABLE notes (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.activate_registry();`)
	mustExec(t, db, `SELECT synchro.create_consumer_group('early_bird')`)
	mustExec(t, db, `SELECT synchro.create_consumer_group('witness')`)
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.consumer_group_state WHERE stream_generation IS NULL`))
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	for i := 10; i < 12; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES ($1, 'a', $2)`, i, i)
	}
	waitChangeTxns(t, db, 2)
	gen1 := txnPositions(t, db, nil)

	// witness adopts generation 1 with its first call.
	c := consumerConn(t, db)
	wt, err := acquireLease(c, "witness", "me", 600)
	require.NoError(t, err)
	wr, err := readChanges(c, "witness", wt, 100, 1<<20)
	require.NoError(t, err)
	require.Equal(t, gen1, wr.positions())

	op := newOperator(t, db)
	id := op.begin(t, "review")
	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))

	_, err = readChanges(c, "witness", wt, 100, 1<<20)
	requireSQLState(t, err, "SY409")

	et, err := acquireLease(c, "early_bird", "me", 600)
	require.NoError(t, err)
	r, err := readChanges(c, "early_bird", et, 100, 1<<20)
	if err != nil {
		requireSQLState(t, err, "SY409")
		return
	}
	var cp string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT checkpoint FROM synchro.consumer_groups WHERE name = 'early_bird'`).Scan(&cp))
	require.Equal(t, gen1, r.positions(),
		"a pre-stream group read after a reset: generation 1's unacknowledged transactions skipped without SY409 (checkpoint now %s)", cp)
}

// compact is "one bounded batch": at most compact_batch_rows rows per call, each call its
// own transaction. The change record's part (synchro._consumer_compact) loops until
// everything up to its horizon is gone, outside the budget: after a release or with no
// group, one compact call deletes the whole backlog in one transaction.
func TestReviewGroupsCompactChangeRecordUnbounded(t *testing.T) {
	t.Parallel()
	db := groupsSetup(t)
	ctx := context.Background()
	for i := 10; i < 15; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES ($1, 'a', $2)`, i, i)
	}
	waitChangeTxns(t, db, 5)
	mustExec(t, db, `INSERT INTO synchro.setting (name, value) VALUES ('compact_batch_rows', '2')
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	op := reviewOperatorConn(t, db.URL)
	var raw string
	require.NoError(t, op.QueryRow(ctx, `SELECT synchro.compact('0')::text`).Scan(&raw))
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &res))
	t.Logf("compact: %s", raw)
	total := 0.0
	for k, v := range res {
		if f, ok := v.(float64); ok && len(k) > 8 && k[:8] == "deleted_" && k != "deleted_write_fences" && k != "deleted_reservations" {
			total += f
		}
	}
	require.LessOrEqual(t, total, 2.0, "one compact call deleted more than compact_batch_rows rows: %s", raw)
}

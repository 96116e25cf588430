package tests

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The edges of what pull may return (CONTRACT.md "Pull"): never beyond the
// materialization high-watermark, never past a compaction that passed the cursor.

// cursorPayload is the authenticated payload of a token: base64url of the payload
// followed by a 32-byte MAC (sql/functions/_token.sql). Tests only; clients never
// parse cursors.
func cursorPayload(t *testing.T, tok string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	require.NoError(t, err)
	require.Greater(t, len(raw), 32)
	return string(raw[:len(raw)-32])
}

// Issue 9 item 8(a): an effect above the high-watermark is never returned, and the
// closing cursor is the high-watermark itself. The effect is seeded directly (as the
// superuser) with the runner stopped, so nothing can move the high-watermark past it.
func TestPullStopsAtHighWatermark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	_, cur := startScope(t, db, "hw", "owner:a")
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one')`)
	e.stopRunner(t)

	before := mustPull(t, db, "hw", "owner:a", cur, 10)
	require.Equal(t, []string{"upsert:tasks/1"}, opsOf(before.Changes))
	require.False(t, before.HasMore)
	var hw string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT materialized_commit_lsn::text FROM synchro.progress`).Scan(&hw))
	require.True(t, strings.HasSuffix(cursorPayload(t, before.Cursor), ":t."+hw),
		"the closing cursor is transaction_end(high-watermark): %s", cursorPayload(t, before.Cursor))

	mustExec(t, db, `
		INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
		                            table_id, relation_id, pk, op, version, image, image_bytes)
		SELECT p.stream_generation, 'owner:a', synchro._scope_hash('owner:a'), p.materialized_commit_lsn + 4096, 0, 0,
		       'tasks', r.relation_id, '99', 'upsert', 'seeded-above-hw', '{"id": 99}', octet_length('{"id": 99}'::jsonb::text)
		  FROM synchro.progress p, synchro.relation r WHERE r.table_id = 'tasks'`)

	for _, max := range []int{1, 10} {
		after := mustPull(t, db, "hw", "owner:a", cur, max)
		require.Equal(t, []string{"upsert:tasks/1"}, opsOf(after.Changes), "max_changes %d", max)
		require.False(t, after.HasMore, "max_changes %d: the effect above the high-watermark is not eligible", max)
		require.Equal(t, before.Cursor, after.Cursor, "max_changes %d: the cursor is the high-watermark's", max)
	}
	// From the high-watermark cursor: nothing, and the same cursor again.
	at := mustPull(t, db, "hw", "owner:a", before.Cursor, 10)
	require.Empty(t, at.Changes)
	require.False(t, at.HasMore)
	require.Equal(t, before.Cursor, at.Cursor)
}

// Issue 9 item 8(b): compaction removes whole source transactions, so a cursor inside
// the newest compacted transaction (a page stopped in it) is stale: SY409, never the
// silent loss of the rest of that transaction. A cursor at its transaction end is not.
func TestPullCursorInsideCompactedTransaction(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	_, cur := startScope(t, db, "inside", "owner:a")
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one'), (2, 'a', 'two'), (3, 'a', 'three')`)
	first := mustPull(t, db, "inside", "owner:a", cur, 1)
	require.True(t, first.HasMore)
	require.Equal(t, []string{"upsert:tasks/1"}, opsOf(first.Changes))
	all, end := pullAll(t, db, "inside", "owner:a", cur, 10)
	require.Len(t, all, 3)

	var res map[string]any
	require.NoError(t, callJSON(db, &res, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 3, res["deleted_effects"], "%v", res)

	_, err := pullRaw(db, "inside", "owner:a", first.Cursor, 10)
	requireSQLState(t, err, "SY409")
	_, err = pullRaw(db, "inside", "owner:a", cur, 10)
	requireSQLState(t, err, "SY409")
	p := mustPull(t, db, "inside", "owner:a", end, 10)
	require.Empty(t, p.Changes)
	require.False(t, p.HasMore)
}

// Issue 13 item 5: a compaction that commits while a pull is between its horizon check
// and its page read must not make that pull skip effects and answer has_more false.
// The pull is held there by a real lock: right after the horizon check it reads
// synchro.write_fence (the capture_pending check), which a held transaction locks.
func TestPullCompactionBetweenHorizonCheckAndPageRead(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one');`)
	db := e.db
	_, cur := startScope(t, db, "racer", "owner:a")
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'a', 'two')`)
	write(t, db, `UPDATE tasks SET title = 'uno' WHERE id = 1`)
	write(t, db, `DELETE FROM tasks WHERE id = 2`)
	eligible, _ := pullAll(t, db, "racer", "owner:a", cur, 100)
	require.Len(t, eligible, 3)
	// One compaction batch of six rows: exactly the consumer groups' change record (3)
	// and the effects (3). Later phases of a batch (the replay ledger with the write
	// fences it covered) would wait for the lock below.
	mustExec(t, db, `UPDATE synchro.setting SET value = '6' WHERE name = 'compact_batch_rows'`)

	hp := heldPull(t, db, "synchro.write_fence", "racer", "owner:a", cur)

	// The pull passed its horizon check (there is no horizon yet). Compact now.
	var res map[string]any
	require.NoError(t, callJSON(db, &res, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 3, res["deleted_effects"], "%v", res)
	r := hp.release(t)
	if r.err == nil {
		t.Fatalf("silent miss: the pull answered %d of the 3 eligible changes (%v) with has_more %v instead of SY409",
			len(r.page.Changes), opsOf(r.page.Changes), r.page.HasMore)
	}
	requireSQLState(t, r.err, "SY409")
}

// Issue 13 item 5, the same race without a held lock: compactions in a loop on one
// connection, inserts on another (the runner materializing them), and a client pulling
// in pages of one change, rebuilding on SY409. Rows are only inserted, so after every
// pull that reached the end (has_more false, cursor at high-watermark H) the replica
// must hold every row whose insert was materialized at or below H: a skipped effect
// would be missing. The source of truth is the writer's own record (compaction trims
// the replay ledger): after each insert commits, the WAL insert position, which is
// after its commit record, so a row recorded at or below H committed below H.
func TestPullRacingCompactionsSkipNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	const writes = 120

	var mu sync.Mutex
	committed := map[int]pglogrepl.LSN{} // id -> a WAL position after its commit
	stop := make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		for i := 1; i <= writes; i++ {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO tasks (id, owner, title) VALUES ($1, 'race', 'r')`, i); err != nil {
				errs <- err
				return
			}
			var s string
			if err := db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
				errs <- err
				return
			}
			l, err := pglogrepl.ParseLSN(s)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			committed[i] = l
			mu.Unlock()
		}
		errs <- nil
	}()
	var compactions atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			if _, err := db.Pool.Exec(ctx, `SELECT synchro.compact('0 seconds')`); err != nil {
				errs <- err
				return
			}
			compactions.Add(1)
		}
	}()

	materializedUpTo := func(hw string) []string {
		h, err := pglogrepl.ParseLSN(hw)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for id, l := range committed {
			if l <= h {
				out = append(out, strconv.Itoa(id))
			}
		}
		return out
	}

	rep, cur := startScope(t, db, "racer", "owner:race")
	rebuilds, checked := 0, 0
	writerDone := false
	for {
		// One pull to the end, in pages of one change.
		var got []change
		cursor := cur
		var err error
		for {
			var p pullPage
			p, err = pullRaw(db, "racer", "owner:race", cursor, 1)
			if err != nil {
				break
			}
			got = append(got, p.Changes...)
			cursor = p.Cursor
			if !p.HasMore {
				break
			}
		}
		if err != nil {
			requireSQLState(t, err, "SY409")
			rep, cur = startScope(t, db, "racer", "owner:race")
			rebuilds++
			continue
		}
		rep.apply(t, got)
		cur = cursor
		payload := cursorPayload(t, cur)
		hw := "0/0" // generation_start: nothing materialized yet
		if i := strings.LastIndex(payload, ":t."); i >= 0 {
			hw = payload[i+3:]
		}
		want := materializedUpTo(hw)
		for _, pk := range want {
			_, ok := rep["tasks/"+pk]
			require.True(t, ok, "silent miss: row %s was materialized at or below %s but never arrived (%d rebuilds)", pk, hw, rebuilds)
		}
		checked++
		if writerDone && len(rep) == writes {
			break
		}
		if !writerDone {
			select {
			case err := <-errs:
				require.NoError(t, err)
				writerDone = true
			default:
			}
		}
	}
	close(stop)
	require.NoError(t, <-errs)
	t.Logf("%d pulls to the end checked, %d rebuilds, %d compactions", checked, rebuilds, compactions.Load())
}

// pullResult is what a held pull answered.
type pullResult struct {
	page pullPage
	err  error
}

// pendingPull is a pull started behind a held lock (heldPull).
type pendingPull struct {
	lockTx pgx.Tx
	done   chan pullResult
}

// heldPull takes table's ACCESS EXCLUSIVE lock in a transaction of its own, starts
// synchro.pull(client, scope, cur, 100) on another connection and returns once the
// pull waits for the lock: it passed every check made before it reads table. The
// lock is held until release (or the test's end).
func heldPull(t *testing.T, db *testdb.DB, table, client, scope, cur string) *pendingPull {
	t.Helper()
	ctx := context.Background()
	locker, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	t.Cleanup(locker.Release)
	lockTx, err := locker.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lockTx.Rollback(ctx) })
	_, err = lockTx.Exec(ctx, `LOCK TABLE `+table+` IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	puller, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	var pid int
	require.NoError(t, puller.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan pullResult, 1)
	go func() {
		defer puller.Release()
		var raw []byte
		var r pullResult
		r.err = puller.QueryRow(ctx, `SELECT synchro.pull($1, $2, $3, 100)::text`, client, scope, cur).Scan(&raw)
		if r.err == nil {
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			r.err = d.Decode(&r.page)
		}
		done <- r
	}()
	eventually(t, 10*time.Second, "the pull to wait for "+table, func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks
			WHERE pid = $1 AND NOT granted AND relation = $2::regclass`, pid, table) == 1
	})
	return &pendingPull{lockTx: lockTx, done: done}
}

// release ends the lock's transaction and returns what the pull answered.
func (p *pendingPull) release(t *testing.T) pullResult {
	t.Helper()
	require.NoError(t, p.lockTx.Rollback(context.Background()))
	select {
	case r := <-p.done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the pull did not return after the lock was released")
		return pullResult{}
	}
}

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// From the second independent review (2026-12-04) of the stream reset (begin_reset, activate_reset,
// abort_reset, runner/reset.go) and of the poison / quarantine operator paths
// (synchro.poison, retry_poison). Every scenario here is checked against
// CONTRACT.md, ADR 001 (seeds/000) and docs/reset.md, docs/sql/*reset*.md,
// docs/sql/poison.md, docs/sql/retry_poison.md. Three found bugs, fixed since ("was a
// bug": each was red first); the others are scenarios found sound. Not parallel: a reset creates a slot
// with an exported snapshot, which waits for every xid-holding transaction of the
// cluster.

// r2RoleConn is a session in role.
func r2RoleConn(t *testing.T, db *testdb.DB, role string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	_, err = c.Exec(ctx, `SET ROLE `+role)
	require.NoError(t, err)
	return c
}

func r2Exec(c *pgx.Conn, sql string, args ...any) error {
	_, err := c.Exec(context.Background(), sql, args...)
	return err
}

// r2Target is the target stream generation of reset id.
func r2Target(t *testing.T, db *testdb.DB, id string) int64 {
	t.Helper()
	var g int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT target_generation FROM synchro.reset WHERE reset_id = $1`, id).Scan(&g))
	return g
}

// r2Gen is the active stream generation.
func r2Gen(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	var g int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT stream_generation FROM synchro.progress`).Scan(&g))
	return g
}

// r2WaitMarkerBlocked waits until the reset is catching_up and its coordinator's
// marker waits for the write_fence lock the test holds.
func r2WaitMarkerBlocked(t *testing.T, db *testdb.DB, id string) {
	t.Helper()
	eventually(t, 120*time.Second, "the catch-up trying to write its marker", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND phase = 'catching_up'`, id) == 1 &&
			countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE d.datname = current_database() AND l.relation = 'synchro.write_fence'::regclass AND NOT l.granted`) > 0
	})
}

// r2Ready is synchro.ready().
func r2Ready(t *testing.T, db *testdb.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT synchro.ready()`).Scan(&ok))
	return ok
}

// TestResetEdgePrivileges: the reset and poison functions are the operator's
// (CONTRACT.md "Roles": synchro_operator has the "registry, poison, reset and
// retention functions"; docs/sql/*: 42501 for any other caller), and the quarantine
// and reset records are not readable by the application. Argument checks of
// begin_reset (docs/sql/begin_reset.md): SY400, and the message never echoes the
// reason (CONTRACT.md, "Error codes": no unbounded text).
func TestResetEdgePrivileges(t *testing.T) {
	db := testdb.New(t)
	mustExec(t, db, syncSchema)
	zero := "00000000-0000-0000-0000-000000000000"
	calls := []string{
		`SELECT synchro.begin_reset('x')`,
		`SELECT synchro.activate_reset('` + zero + `')`,
		`SELECT synchro.abort_reset('` + zero + `')`,
		`SELECT synchro.reset_status('` + zero + `')`,
		`SELECT synchro.retry_poison()`,
		`SELECT count(*) FROM synchro.poison`,
		`SELECT count(*) FROM synchro.quarantine`,
		`SELECT count(*) FROM synchro.reset`,
		`SELECT count(*) FROM synchro.reset_baseline`,
		`UPDATE synchro.quarantine SET retry_requested = true`,
		`SELECT synchro.runner_reset_fail('` + zero + `', 'x')`,
		`SELECT synchro.runner_reset_mark('` + zero + `')`,
		`SELECT synchro.runner_poison(1, '0/0', 'x', NULL)`,
	}
	for _, role := range []string{"synchro_app", "synchro_consumer"} {
		c := r2RoleConn(t, db, role)
		for _, sql := range calls {
			requireSQLState(t, r2Exec(c, sql), "42501")
		}
	}
	// The runner may not act as the operator either.
	rc := r2RoleConn(t, db, "synchro_runner")
	for _, sql := range calls[:8] {
		requireSQLState(t, r2Exec(rc, sql), "42501")
	}
	// The operator may not call the runner's internals.
	oc := r2RoleConn(t, db, "synchro_operator")
	for _, sql := range calls[10:] {
		requireSQLState(t, r2Exec(oc, sql), "42501")
	}

	// Argument checks come first; the stream does not exist yet.
	secret := "SECRET-" + strings.Repeat("z", 200)
	for _, reason := range []any{nil, "", secret} {
		pe := requireSQLState(t, r2Exec(oc, `SELECT synchro.begin_reset($1)`, reason), "SY400")
		require.NotContains(t, pe.Message, "SECRET")
		require.NotContains(t, pe.Detail, "SECRET")
	}
	pe := requireSQLState(t, r2Exec(oc, `SELECT synchro.begin_reset('no stream')`), "SY400")
	require.Contains(t, pe.Message, "no stream")
	// retry_poison with nothing blocked, unknown ids.
	requireSQLState(t, r2Exec(oc, `SELECT synchro.retry_poison()`), "SY400")
	for _, f := range []string{"activate_reset", "abort_reset", "reset_status"} {
		requireSQLState(t, r2Exec(oc, `SELECT synchro.`+f+`($1)`, zero), "SY400")
		requireSQLState(t, r2Exec(oc, `SELECT synchro.`+f+`(NULL)`), "SY400")
	}
}

// r2TxnOfXid is the commit LSN the runner recorded for source transaction xid ("" when
// not materialized), and how many ledger rows it has (exactly once: 1).
func r2TxnOfXid(t *testing.T, db *testdb.DB, xid int64) (string, int) {
	t.Helper()
	var lsn *string
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT max(commit_lsn)::text, count(*)::int FROM synchro.txn WHERE xid % 4294967296 = $1`, xid).Scan(&lsn, &n))
	if lsn == nil {
		return "", n
	}
	return *lsn, n
}

// TestResetEdgePoisonRetryKeepsOrder: a poison in the middle of a materialization
// batch, with source transactions queued behind it and more arriving while it is
// blocked. ADR 001 ("Poison-event quarantine and recovery"): the transactions before it
// materialize, it is quarantined with its own identity (its commit LSN), nothing after
// it materializes or is acknowledged; the record is redacted (no row payloads, no
// error text); only the operator may retry; after a repair the retry materializes the
// same transaction with the same identity and the later ones follow in commit order,
// each exactly once.
func TestResetEdgePoisonRetryKeepsOrder(t *testing.T) {
	eachDecoder(t, r2PoisonRetryKeepsOrder)
}

func r2PoisonRetryKeepsOrder(t *testing.T) {
	db := runnerSetup(t)
	ctx := context.Background()
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	write(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a'); INSERT INTO items (id, owner) VALUES (6, 'b')`)
	waitAcked(t, db)
	_, curA := startScope(t, db, "ca", "owner:a")
	_, curB := startScope(t, db, "cb", "owner:b")

	// The materialization of one row fails, and its error text carries the row image.
	mustExec(t, db, `
		CREATE FUNCTION public.r2_break() RETURNS trigger LANGUAGE plpgsql AS
		  $$ BEGIN IF NEW.pk = '13' THEN RAISE EXCEPTION 'refused %', NEW.image::text; END IF; RETURN NEW; END $$;
		CREATE TRIGGER r2_break BEFORE INSERT ON synchro.effect FOR EACH ROW EXECUTE FUNCTION public.r2_break();`)

	// A batch: 11, 12 before the poison, 13 the poison, 14, 15 after it.
	held, release := holdMaterialization(t, db)
	xids := map[int]int64{}
	owner := func(id int) string {
		if id%2 == 1 {
			return "a"
		}
		return "b"
	}
	for id := 11; id <= 15; id++ {
		xids[id] = commitXid(t, db, `INSERT INTO items (id, owner, note) VALUES ($1::int8, $2, 'SECRET-VALUE-' || $1::text)`, id, owner(id))
	}
	held()
	release()
	var q []quarantineRow
	eventually(t, 30*time.Second, "the quarantine", func() bool {
		q = quarantines(t, db)
		return len(q) == 1
	})
	for _, id := range []int{11, 12} {
		_, n := r2TxnOfXid(t, db, xids[id])
		require.Equal(t, 1, n, "item %d before the poison is materialized", id)
	}
	for _, id := range []int{13, 14, 15} {
		_, n := r2TxnOfXid(t, db, xids[id])
		require.Equal(t, 0, n, "item %d at or after the poison is not materialized", id)
	}
	lsn12, _ := r2TxnOfXid(t, db, xids[12])
	require.Greater(t, lsnOf(t, &q[0].CommitLSN), lsnOf(t, &lsn12), "quarantined at the poison, not before it")
	requireBlockedAt(t, db, q[0])

	// Redacted: the record holds no value of the row and no error text.
	var rec string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT jsonb_agg(to_jsonb(q))::text FROM synchro.quarantine q`).Scan(&rec))
	require.NotContains(t, rec, "SECRET")
	require.NotContains(t, rec, "refused")
	require.Regexp(t, `^[a-z0-9_]{1,48}$`, q[0].Class)
	var view string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT jsonb_agg(to_jsonb(p))::text FROM synchro.poison p`).Scan(&view))
	require.NotContains(t, view, "SECRET")
	var cols []string
	rows, err := db.Pool.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = 'synchro.poison'::regclass AND attnum > 0 ORDER BY attnum`)
	require.NoError(t, err)
	cols, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Subset(t, cols, []string{"stream_generation", "commit_lsn", "failure_class", "relation_id", "attempts", "first_seen", "last_seen"})

	// More transactions queue behind the poison while it blocks.
	for id := 16; id <= 17; id++ {
		xids[id] = commitXid(t, db, `INSERT INTO items (id, owner, note) VALUES ($1, $2, 'later')`, id, owner(id))
	}
	time.Sleep(500 * time.Millisecond)
	requireBlockedAt(t, db, quarantines(t, db)[0])

	// Only the operator may ask for the retry.
	app := r2RoleConn(t, db, "synchro_app")
	requireSQLState(t, r2Exec(app, `SELECT synchro.retry_poison()`), "42501")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine WHERE retry_requested`))

	// Repair, retry as the operator.
	mustExec(t, db, `DROP TRIGGER r2_break ON synchro.effect`)
	op := r2RoleConn(t, db, "synchro_operator")
	require.NoError(t, r2Exec(op, `SELECT synchro.retry_poison()`))
	waitXid(t, db, xids[17])

	// Each transaction exactly once, in commit order, the poison with its own identity.
	prev := ""
	for id := 11; id <= 17; id++ {
		lsn, n := r2TxnOfXid(t, db, xids[id])
		require.Equal(t, 1, n, "item %d materialized exactly once", id)
		if prev != "" {
			require.Greater(t, lsnOf(t, &lsn), lsnOf(t, &prev), "item %d after the one before", id)
		}
		prev = lsn
		if id == 13 {
			require.Equal(t, q[0].CommitLSN, lsn, "the retried transaction keeps its replay identity")
		}
	}
	qs := quarantines(t, db)
	require.Len(t, qs, 1)
	require.True(t, qs[0].Resolved)
	changes, _ := pullAll(t, db, "ca", "owner:a", curA, 100)
	require.Equal(t, []string{"upsert:items/11", "upsert:items/13", "upsert:items/15", "upsert:items/17"}, opsOf(changes))
	changes, _ = pullAll(t, db, "cb", "owner:b", curB, 100)
	require.Equal(t, []string{"upsert:items/12", "upsert:items/14", "upsert:items/16"}, opsOf(changes))
	p := waitAcked(t, db)
	require.Nil(t, p.PoisonClass)
	// Nothing left to retry.
	requireSQLState(t, r2Exec(op, `SELECT synchro.retry_poison()`), "SY400")
}

// r2PushInsert pushes the insert of task id (owner, project 1) for client and returns
// its fence id; ctx bounds the wait (a push may queue behind the reset's marker).
func r2PushInsert(t *testing.T, db *testdb.DB, client string, id int, owner string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := pushRawOn(ctx, db.Pool, client,
		pushJSON(t, pushIns(pushID(), "tasks", id, pm{"owner": owner, "project_id": 1, "title": "pushed"})))
	require.NoError(t, err)
	require.Contains(t, raw, `"accepted"`)
	var fence string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT fence_id::text FROM synchro.write_fence f JOIN synchro.relation r USING (relation_id)
		  WHERE f.client_id = $1 AND r.table_id = 'tasks' AND f.pk = $2`, client, fmt.Sprint(id)).Scan(&fence))
	return fence
}

// TestResetEdgeAbortAfterCatchUp: a reset aborted after its baseline was staged and
// its catch-up materialized transactions (direct writes and pushes) into the staged
// state. docs/sql/abort_reset.md: the stage and the target generation's replay rows go
// at once, the candidate slot with the runner's cleanup, the old stream resumes as it
// was (its cursors valid), reset_baseline records never count. ADR 001: no write
// committed during the reset window is lost or doubled: the old stream materializes
// each exactly once, in commit order, and its pushes' capture_pending clears only by
// that WAL materialization.
func TestResetEdgeAbortAfterCatchUp(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1'); INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	_, cursor := startScope(t, db, "c1", "owner:o1")
	gen := r2Gen(t, db)

	// Requested while no runner runs: a push and a write land before the candidate's
	// snapshot (the old stream is blocked from begin_reset on).
	e.stopRunner(t)
	op := newOperator(t, db)
	id := op.begin(t, "rehearsal, aborted after catch-up")
	target := r2Target(t, db, id)
	p1 := r2PushInsert(t, db, "pa", 100, "o1")
	x1 := commitXid(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'before the snapshot')`)

	// The staged rows' indexing waits for this lock (on the live progress table, no
	// xid: the slot's snapshot does not wait for it), and the marker for the second, so
	// the reset stays in staging, then in catching_up.
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `LOCK TABLE synchro.progress IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	e.startRunner(t)
	eventually(t, 120*time.Second, "baseline rows staged", func() bool {
		s := op.status(t, id)
		return s.Phase == "staging" && s.ConsistentPoint != nil
	})
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset_baseline WHERE reset_id = $1 AND fence_id = $2`, id, p1))

	// After the snapshot: the catch-up materializes these into the staged state.
	p2 := r2PushInsert(t, db, "pb", 101, "o1")
	x2 := commitXid(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'during catch-up'); UPDATE notes SET body = 'edited' WHERE id = 'n1'`)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.reset_baseline WHERE reset_id = $1 AND fence_id = $2`, id, p2))
	require.NoError(t, held.Rollback(ctx))
	r2WaitMarkerBlocked(t, db, id)
	// The marker waits (the catch-up may not have reached the window's transactions
	// yet); once written, the catch-up materializes them before the barrier.
	require.NoError(t, lock.Rollback(ctx))
	op.waitPhase(t, id, "ready")
	eventually(t, 60*time.Second, "the catch-up materialized the window's transactions", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.event WHERE stream_generation = $1 AND fence_id = $2`, target, p2) == 1 &&
			countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1 AND xid % 4294967296 = $2`, target, x2) == 1
	})
	// Staged coverage never clears the gate.
	requireSQLState(t, rebuildErr(db, "pa", "owner:o1"), "SY503")
	requireSQLState(t, rebuildErr(db, "pb", "owner:o1"), "SY503")
	// The old stream is blocked: nothing of the window on it.
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1 AND xid % 4294967296 IN ($2, $3)`, gen, x1, x2))
	// Before the abort the old cursor still serves (the old stream's state).
	page, err := pullRaw(db, "c1", "owner:o1", cursor, 100)
	require.NoError(t, err)
	require.Empty(t, page.Changes)

	s := op.status(t, id)
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	require.Equal(t, "aborted", op.status(t, id).Phase)
	// At once: the stage and the target generation's replay rows.
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname = 'synchro_reset'`))
	// The consumer groups' change records too (they stayed until a compaction that
	// recorded a horizon: the review found 3; docs/sql/abort_reset.md says at once).
	for _, tbl := range []string{"txn", "event", "effect", "quarantine", "change"} {
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.`+tbl+` WHERE stream_generation = $1`, target),
			"synchro.%s rows of the aborted target generation", tbl)
	}

	// The old stream resumes: every write of the window exactly once, in commit order.
	waitXid(t, db, x2)
	eventually(t, 30*time.Second, "the pushes covered by the old stream", func() bool {
		return rebuildErr(db, "pa", "owner:o1") == nil && rebuildErr(db, "pb", "owner:o1") == nil
	})
	require.Equal(t, r2Gen(t, db), gen)
	for _, f := range []string{p1, p2} {
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE fence_id = $1 AND coverage = 'wal'`, f))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE fence_id = $1 AND stream_generation = $2`, f, gen))
	}
	changes, _ := pullAll(t, db, "c1", "owner:o1", cursor, 100)
	require.Equal(t, []string{"upsert:tasks/100", "upsert:notes/n2", "upsert:tasks/101", "upsert:notes/n3", "upsert:notes/n1"}, opsOf(changes))
	rep, _ := startScope(t, db, "c2", "owner:o1")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:o1"), rep, "owner:o1 after the abort")
	eventually(t, 30*time.Second, "the candidate slot dropped and the reset cleaned", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, *s.CandidateSlot) == 0 &&
			countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, id) == 1
	})
	eventually(t, 30*time.Second, "ready again", func() bool { return r2Ready(t, db) })
	// A new reset may begin.
	id2 := op.begin(t, "again")
	require.NotEqual(t, target, r2Target(t, db, id2), "target generations are never reused")
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id2))
}

// TestResetEdgeOldTokensRefused: after activation every cursor and rebuild token of
// the old generation is refused with SY409 and never served (CONTRACT.md "Pull":
// "Authentic but from another generation ... SY409"; "Operator": "when it returns ...
// every old cursor and rebuild token is stale (SY409)"), whatever its point:
// generation_start, transaction_end, inside a transaction, handed out while the reset
// was open, or a rebuild session. Before activation they are served (the old stream's
// state). SY400 (bound to another scope) still comes first, and SY409 before SY503 for
// a client with an uncovered push ("the first of SY400, SY403, SY409, SY503"). A
// consumer group of the old generation reads SY409 (docs/sql/read_changes.md); one
// created after activation reads only the new generation.
func TestResetEdgeOldTokensRefused(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	// Nothing materialized yet: the rebuild's cursor is generation_start.
	_, curStart := startScope(t, db, "c1", "owner:o1")
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'a'), ('n2', 'o1', 'b'), ('n3', 'o1', 'c')`)
	inside := mustPull(t, db, "c1", "owner:o1", curStart, 1)
	require.True(t, inside.HasMore)
	curInside := inside.Cursor
	_, curEnd := pullAll(t, db, "c1", "owner:o1", curStart, 100)
	session := mustRebuildPage(t, db, "c1", "owner:o1", "", 1)
	require.True(t, session.HasMore)

	// A push decided before the reset; its replay after it returns the recorded outcome
	// byte for byte and writes nothing (CONTRACT.md "Push": outcomes are kept whatever
	// the retention of the change stream).
	decided := pushJSON(t, pushIns(pushID(), "notes", "d1", pm{"owner": "o9", "body": "decided"}))
	before, err := pushRawOn(context.Background(), db.Pool, "decider", decided)
	require.NoError(t, err)
	require.Contains(t, before, `"accepted"`)

	mustExec(t, db, `SELECT synchro.create_consumer_group('old_group')`)
	cc := consumerConn(t, db)
	tok, err := acquireLease(cc, "old_group", "me", 600)
	require.NoError(t, err)
	rd, err := readChanges(cc, "old_group", tok, 100, 1<<20)
	require.NoError(t, err)
	require.NotEmpty(t, rd.Transactions)

	op := newOperator(t, db)
	id := op.begin(t, "old tokens")
	// The registry cannot activate while a reset is open (docs/reset.md).
	mustExec(t, db, `CREATE TABLE extra (id int8 PRIMARY KEY)`)
	mustExec(t, db, `GRANT SELECT ON extra TO synchro_operator`)
	require.NoError(t, op.exec(`SELECT synchro.register_table('extra', 'extra')`))
	requireSQLState(t, op.exec(`SELECT synchro.activate_registry()`), "SY400")
	// While it is open, readiness is false and the old tokens are served.
	eventually(t, 10*time.Second, "not ready while the reset is open", func() bool { return !r2Ready(t, db) })
	for _, c := range []string{curStart, curInside, curEnd} {
		_, err := pullRaw(db, "c1", "owner:o1", c, 100)
		require.NoError(t, err, "an old cursor before activation")
	}
	_, curDuring := startScope(t, db, "c1", "owner:o1")
	op.waitPhase(t, id, "ready")

	// A push after the barrier, not covered until the new stream materializes it.
	e.stopRunner(t)
	r2PushInsert(t, db, "pend", 200, "o1")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))

	for name, c := range map[string]string{"start": curStart, "inside": curInside, "end": curEnd, "during": curDuring} {
		_, err := pullRaw(db, "c1", "owner:o1", c, 100)
		requireSQLState(t, err, "SY409")
		_, err = pullRaw(db, "c1", "owner:o2", c, 100)
		requireSQLState(t, err, "SY400")
		_, err = pullRaw(db, "pend", "owner:o1", c, 100)
		pe := requireSQLState(t, err, "SY409")
		require.NotContains(t, pe.Message, "capture_pending", name)
	}
	_, err = rebuildRaw(db, "c1", "owner:o1", session.Session, 1)
	requireSQLState(t, err, "SY409")
	_, err = rebuildRaw(db, "pend", "owner:o1", session.Session, 1)
	requireSQLState(t, err, "SY409")
	requireSQLState(t, rebuildErr(db, "pend", "owner:o1"), "SY503")

	_, err = readChanges(cc, "old_group", tok, 100, 1<<20)
	requireSQLState(t, err, "SY409")

	fences := countOf(t, db, `SELECT count(*) FROM synchro.write_fence`)
	after, err := pushRawOn(context.Background(), db.Pool, "decider", decided)
	require.NoError(t, err)
	require.Equal(t, before, after, "a replayed push after the reset returns its recorded outcome")
	require.Equal(t, fences, countOf(t, db, `SELECT count(*) FROM synchro.write_fence`))

	e.startRunner(t)
	eventually(t, 60*time.Second, "the push after the barrier materialized on the new stream", func() bool {
		return rebuildErr(db, "pend", "owner:o1") == nil
	})
	rows, last := fullRebuild(t, db, "pend", "owner:o1", 1000)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2", "notes/n3", "tasks/200"}, rowKeys(rows))
	write(t, db, `INSERT INTO notes VALUES ('n4', 'o1', 'after')`)
	changes, _ := pullAll(t, db, "pend", "owner:o1", last.Cursor, 100)
	require.Equal(t, []string{"upsert:notes/n4"}, opsOf(changes))

	// A group made now reads the new generation only: nothing of the old one, nothing of
	// the catch-up before the barrier.
	mustExec(t, db, `SELECT synchro.create_consumer_group('new_group')`)
	ntok, err := acquireLease(cc, "new_group", "me", 600)
	require.NoError(t, err)
	nr, err := readChanges(cc, "new_group", ntok, 100, 1<<20)
	require.NoError(t, err)
	var got []string
	gen := fmt.Sprint(r2Gen(t, db))
	for _, x := range nr.Transactions {
		require.True(t, strings.HasPrefix(x.Position, gen+":"), x.Position)
		for _, c := range x.Changes {
			got = append(got, c.Table+"/"+pkText(c.PK))
		}
	}
	require.Equal(t, []string{"tasks/200", "notes/n4"}, got)
	// The registration staged while the reset was open activates now, on the new stream.
	require.NoError(t, op.exec(`SELECT synchro.activate_registry()`))
	write(t, db, `INSERT INTO extra VALUES (1); INSERT INTO notes VALUES ('n5', 'o1', 'after the registry')`)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine WHERE resolved_at IS NULL`))
	// Compaction after the reset keeps working, with the old group still there.
	var res map[string]any
	require.NoError(t, callJSON(db, &res, `SELECT synchro.compact('0 seconds')::text`))
	eventually(t, 60*time.Second, "ready on the new stream", func() bool { return r2Ready(t, db) })
}

// TestResetEdgeWritersAndPushesAcrossReset: direct writers (inserts, updates that
// move rows between scopes, deletes) and a push client (inserts, and updates on the
// versions it was given) keep committing from before begin_reset until after
// activate_reset. ADR 001: the baseline is the source state at the candidate's
// consistent point, the catch-up applies every later transaction through the barrier,
// later ones resume after generation_start; nothing is lost or doubled across either
// boundary. A client that rebuilds right after activation (while the writers go on)
// and then pulls equals the live tables, and no pulled effect repeats the version its
// rebuild already delivered for that row; every accepted push is covered in the end.
func TestResetEdgeWritersAndPushesAcrossReset(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO project_members VALUES (1, 1, 'u1'), (2, 2, 'u2');
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, 1 + g % 2, 'o' || (1 + g % 2), 't' || g FROM generate_series(1, 20) g;`)
	db := e.db
	ctx := context.Background()
	scopes := []string{"owner:o1", "owner:o2", "user:u1", "user:u2"}
	_, oldCur := startScope(t, db, "old", "owner:o1")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var direct, pushes atomic.Int64
	wg.Go(func() {
		for i := 1; i <= 600; i++ {
			select {
			case <-stop:
				return
			default:
			}
			o := 1 + i%2
			var sql string
			switch i % 4 {
			case 0:
				sql = fmt.Sprintf(`UPDATE tasks SET v = v + 1, owner = 'o%d' WHERE id = %d`, o, 1+i%20)
			case 1:
				sql = fmt.Sprintf(`INSERT INTO notes VALUES ('w%d', 'o%d', 'x')`, i, o)
			case 2:
				sql = fmt.Sprintf(`UPDATE notes SET owner = 'o%d', body = 'moved' WHERE id = 'w%d'`, 3-o, i-1)
			default:
				sql = fmt.Sprintf(`DELETE FROM notes WHERE id = 'w%d'`, i-6)
			}
			if _, err := db.Pool.Exec(ctx, sql); err != nil {
				t.Errorf("direct writer: %v", err)
				return
			}
			direct.Add(1)
			time.Sleep(4 * time.Millisecond)
		}
	})
	wg.Go(func() {
		versions := map[int]string{}
		for i := 1; i <= 300; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var m pm
			id := 1000 + i
			if i%3 == 0 && versions[id-1] != "" {
				id = id - 1
				m = pushUpd(pushID(), "tasks", id, versions[id], pm{"title": fmt.Sprintf("edit %d", i), "owner": fmt.Sprintf("o%d", 1+i%2)})
			} else {
				m = pushIns(pushID(), "tasks", id, pm{"owner": fmt.Sprintf("o%d", 1+i%2), "project_id": 1 + i%2, "title": "p"})
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			raw, err := pushRawOn(pctx, db.Pool, "pw", pushJSON(t, m))
			cancel()
			if err != nil {
				t.Errorf("push: %v", err)
				return
			}
			var res struct {
				Results []struct {
					Status  string `json:"status"`
					Version string `json:"version"`
				} `json:"results"`
			}
			if err := json.Unmarshal([]byte(raw), &res); err != nil || len(res.Results) != 1 || res.Results[0].Status != "accepted" {
				t.Errorf("push result %s (%v)", raw, err)
				return
			}
			versions[id] = res.Results[0].Version
			pushes.Add(1)
			time.Sleep(8 * time.Millisecond)
		}
	})
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(300 * time.Millisecond)
	op := newOperator(t, db)
	id := op.begin(t, "writers and pushes across the reset")
	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	// Right after activation, while the writers go on.
	fresh := map[string]replica{}
	freshRows := map[string]map[string]string{}
	freshCur := map[string]string{}
	for _, s := range scopes {
		rep, rows, cur := onePageRebuild(t, db, "fresh", s)
		fresh[s], freshCur[s] = rep, cur
		freshRows[s] = map[string]string{}
		for _, r := range rows {
			freshRows[s][r.key()] = r.Version
		}
	}
	_, err := pullRaw(db, "old", "owner:o1", oldCur, 100)
	requireSQLState(t, err, "SY409")
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	stop = make(chan struct{}) // for the deferred close
	t.Logf("direct writes %d, pushes %d", direct.Load(), pushes.Load())
	require.Greater(t, pushes.Load(), int64(10))

	// Everything written is materialized: a sentinel after the writers, and the pushes.
	write(t, db, `INSERT INTO notes VALUES ('sentinel', 'o1', 's')`)
	eventually(t, 60*time.Second, "every push covered", func() bool { return rebuildErr(db, "pw", "owner:o1") == nil })
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE coverage IS NULL`))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine WHERE resolved_at IS NULL`))

	for _, s := range scopes {
		changes, _ := pullAll(t, db, "fresh", s, freshCur[s], 1000)
		seen := map[string]bool{}
		for _, c := range changes {
			k := c.key()
			if !seen[k] && c.Op == "upsert" {
				require.NotEqual(t, freshRows[s][k], c.Version, "%s: %s delivered by the rebuild and again by pull (doubled across activation)", s, k)
			}
			seen[k] = true
		}
		fresh[s].apply(t, changes)
		requireReplica(t, liveScope(t, db, liveScopeSQL, s), fresh[s], s+" rebuilt right after activation, then pulled")
		rep, _ := startScope(t, db, "late", s)
		requireReplica(t, liveScope(t, db, liveScopeSQL, s), rep, s+" rebuilt at the end")
	}
}

// TestResetEdgePushInFlightAcrossMarker: a push whose transaction straddles the
// activation barrier's snapshot does not block activation. The push writes its fence
// inside a savepoint (one per mutation), so the fence row's xmin is a subtransaction
// id, and pg_current_snapshot lists top-level ids only: a subtransaction of a
// transaction still open when the marker took barrier_snapshot, with a later
// transaction committed before it, looked visible in that snapshot (PostgreSQL's
// pg_visible_in_snapshot gives no right answer for subtransaction ids). activate_reset
// then counted the push's fence as committed through the barrier, found it neither in
// the baseline nor in the catch-up (it commits after the barrier), and refused the
// reset (SY400 "push fences through the barrier are not covered"): seen once in a run
// of TestResetEdgeWritersAndPushesAcrossReset. The check now judges a fence by its
// push's top-level transaction (write_fence.txid).
//
// The interleaving, held with locks: a holder keeps the marker out (ROW EXCLUSIVE on
// write_fence, no xid); the push takes its subtransaction id and waits on a row lock
// held by a blocker; an unrelated transaction commits (the snapshot's xmax passes the
// subtransaction id); the holder lets the marker through; the blocker lets the push
// finish after the barrier.
func TestResetEdgePushInFlightAcrossMarker(t *testing.T) {
	e := newSyncEnv(t, `INSERT INTO project_members VALUES (1, 1, 'u1');`)
	db := e.db
	ctx := context.Background()

	write(t, db, `INSERT INTO notes VALUES ('settled', 'o1', 's')`)

	holder, blocker, pusher := reviewSession(t, db.URL, nil), reviewSession(t, db.URL, nil), reviewSession(t, db.URL, nil)

	// The holder: ROW EXCLUSIVE on write_fence (as a push holds it), no xid, so the
	// candidate slot's snapshot does not wait for it; the marker's SHARE request does.
	htx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = htx.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	op := newOperator(t, db)
	id := op.begin(t, "a push in flight across the marker")
	op.waitPhase(t, id, "catching_up")

	// The blocker inserts the row the push will insert, and holds; the push takes its
	// subtransaction id (its push_context row), inserts, and waits on the key for the
	// blocker, before its fence trigger asks for write_fence.
	btx, err := blocker.Begin(ctx)
	require.NoError(t, err)
	_, err = btx.Exec(ctx, `INSERT INTO tasks (id, project_id, owner, title) VALUES (6000, 1, 'o1', 'blocker')`)
	require.NoError(t, err)
	var pusherPID int32
	require.NoError(t, pusher.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pusherPID))
	pushed := make(chan error, 1)
	var second string
	go func() {
		var err error
		second, err = pushRawOn(ctx, pusher, "pf", pushJSON(t, pushIns(pushID(), "tasks", 6000, pm{"owner": "o1", "project_id": 1, "title": "across"})))
		pushed <- err
	}()
	eventually(t, 30*time.Second, "the push waits for the row lock with its xid taken", func() bool {
		return countOf(t, db, fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity
			WHERE pid = %d AND wait_event_type = 'Lock' AND wait_event = 'transactionid' AND backend_xid IS NOT NULL`, pusherPID)) == 1
	}, func() {
		var st string
		_ = db.Pool.QueryRow(ctx, `SELECT concat_ws(' ', state, wait_event_type, wait_event, backend_xid, left(query, 60)) FROM pg_stat_activity WHERE pid = $1`, pusherPID).Scan(&st)
		t.Logf("pusher: %s; pushed: %d; result %s", st, len(pushed), second)
	})
	// A transaction with a later xid commits: the marker's snapshot xmax passes the
	// push's subtransaction id, which the snapshot's xip list does not name.
	mustExec(t, db, `INSERT INTO notes VALUES ('later', 'o1', 'l')`) // the stream is held by the reset: not awaited

	// The marker takes its SHARE lock and barrier_snapshot, with the push still open.
	require.NoError(t, htx.Commit(ctx))
	eventually(t, 60*time.Second, "the marker transaction committed", func() bool {
		return countOf(t, db, fmt.Sprintf(`SELECT count(*) FROM synchro.reset WHERE reset_id = '%s' AND barrier_xid IS NOT NULL`, id)) == 1
	})
	var inXip bool
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT backend_xid FROM pg_stat_activity WHERE pid = $2)::text::bigint IN (SELECT x::text::bigint FROM pg_snapshot_xip(r.barrier_snapshot) x)
		  FROM synchro.reset r WHERE r.reset_id = $1::uuid`, id, pusherPID).Scan(&inXip))
	require.True(t, inXip, "the push's transaction was open when the marker took its snapshot")

	// The blocker gives the key up; the push finishes after the barrier.
	require.NoError(t, btx.Rollback(ctx))
	require.NoError(t, <-pushed)
	require.Contains(t, second, `"accepted"`)

	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id),
		"a push committed after the barrier is not a fence through it")

	// After activation the new stream covers the push, like any later write.
	write(t, db, `INSERT INTO notes VALUES ('sentinel', 'o1', 's')`)
	eventually(t, 60*time.Second, "every push covered", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE coverage IS NULL`) == 0
	})
	rep, _ := startScope(t, db, "late", "owner:o1")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:o1"), rep, "owner:o1 after the reset")
}

// TestResetEdgeBeginTwice: one reset at a time (docs/sql/begin_reset.md: SY400 "a
// reset is open already", naming its phase), also for two operators racing: the
// second call waits for the first and is refused with SY400, never a second open reset.
// The check holds for a caller in a REPEATABLE READ transaction whose snapshot predates
// the first reset too.
func TestResetEdgeBeginTwice(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	e.stopRunner(t) // the resets stay in requested: no slot is made

	a := r2RoleConn(t, db, "synchro_operator")
	b := r2RoleConn(t, db, "synchro_operator")
	txa, err := a.Begin(ctx)
	require.NoError(t, err)
	var first string
	require.NoError(t, txa.QueryRow(ctx, `SELECT synchro.begin_reset('first')::text`).Scan(&first))
	done := make(chan error, 1)
	go func() { done <- r2Exec(b, `SELECT synchro.begin_reset('second')`) }()
	select {
	case err := <-done:
		t.Fatalf("the second begin_reset did not wait for the first: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, txa.Commit(ctx))
	pe := requireSQLState(t, <-done, "SY400")
	require.Contains(t, pe.Message, "requested")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset`))
	require.NoError(t, r2Exec(a, `SELECT synchro.abort_reset($1)`, first))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE phase <> 'aborted'`))
}

// TestResetEdgeBeginTwiceRepeatableRead (was a bug, fixed; low severity): an operator whose
// transaction is REPEATABLE READ (a migration tool's default, or psql with
// default_transaction_isolation) calls begin_reset after another operator's reset
// committed, but its snapshot predates that reset. docs/sql/begin_reset.md says the
// call fails with SY400 "a reset is open already (phase requested)". begin_reset reads
// synchro.reset with the caller's transaction snapshot, does not see the open reset,
// computes the same target generation and hits the unique index: 23505, naming an
// internal constraint (reset_target_generation_key), not the documented SY400. Nothing
// is doubled (the unique indexes hold), but the caller gets an undocumented error.
// Cause: sql/functions/begin_reset.sql checks open resets (and max(target_generation))
// under the caller's snapshot. Fix: refuse callers outside READ COMMITTED with SY400
// (as synchro.compact does for the consumer floor), or map the unique violation of
// reset_one_open / reset_target_generation_key to the SY400 "a reset is open already".
func TestResetEdgeBeginTwiceRepeatableRead(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	e.stopRunner(t)
	a := r2RoleConn(t, db, "synchro_operator")
	b := r2RoleConn(t, db, "synchro_operator")
	txr, err := a.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = txr.Rollback(ctx) }()
	_, err = txr.Exec(ctx, `SELECT count(*) FROM synchro.registry`)
	require.NoError(t, err)
	require.NoError(t, r2Exec(b, `SELECT synchro.begin_reset('third')`))
	_, err = txr.Exec(ctx, `SELECT synchro.begin_reset('fourth')`)
	// 40001 since begin_reset takes the registry lock (TestResetRacesRegistryActivation):
	// the other reset wrote the registry clock after this snapshot. Retried whole, the
	// call reads the open reset: SY400.
	requireSQLState(t, err, "40001")
	require.NoError(t, txr.Rollback(ctx))
	txr, err = a.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = txr.Exec(ctx, `SELECT synchro.begin_reset('fourth')`)
	requireSQLState(t, err, "SY400")
	require.NoError(t, txr.Rollback(ctx))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE phase = 'requested'`))
}

// TestResetEdgeKilledAroundCleanupAndCatchUp: `synchro run` SIGKILLed at the steps
// the earlier kill test does not reach (ADR 001: "Process death before activation
// either resumes from that same permanent slot and boundary or discards the stage";
// "The old slot and projections are retained until activation is durable ..., then
// retired by controlled cleanup"): right after abort_reset (before the runner dropped
// the candidate), right after the catch-up committed a transaction into the staged
// state (its confirmation to the candidate slot may not have been sent), and right
// after activate_reset (before the old slot was dropped). Each restart ends in the
// right state: no slot left behind, nothing lost or doubled.
func TestResetEdgeKilledAroundCleanupAndCatchUp(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("needs the private cluster")
	}
	db := testdb.New(t)
	mustExec(t, db, syncSchema)
	ctx := context.Background()
	run := startRunProc(t, db)
	waitStream(t, db)
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1');
		INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'one');
		INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	_, cursor := startScope(t, db, "k", "owner:o1")
	oldSlot := runnerSlot(db)
	op := newOperator(t, db)

	// 1. Killed right after the abort.
	a := op.begin(t, "aborted, then killed")
	sa := op.waitPhase(t, a, "ready")
	xa := commitXid(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'during the aborted reset')`)
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, a))
	run.kill(t, db)
	t.Logf("after the kill: cleaned=%d candidate slots=%d",
		countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, a),
		countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, *sa.CandidateSlot))
	run = startRunProc(t, db)
	waitXid(t, db, xa)
	eventually(t, 60*time.Second, "the aborted candidate dropped", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, *sa.CandidateSlot) == 0 &&
			countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, a) == 1
	})
	changes, cursor := pullAll(t, db, "k", "owner:o1", cursor, 100)
	require.Equal(t, []string{"upsert:notes/n2"}, opsOf(changes))

	// 2. Killed right after the catch-up committed a transaction into the stage.
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `LOCK TABLE synchro.progress IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	b := op.begin(t, "catch-up killed")
	target := r2Target(t, db, b)
	eventually(t, 120*time.Second, "baseline rows staged", func() bool {
		s := op.status(t, b)
		return s.Phase == "staging" && s.ConsistentPoint != nil
	})
	var xs []int64
	for i := 3; i <= 6; i++ {
		xs = append(xs, commitXid(t, db, `INSERT INTO notes VALUES ($1, 'o1', 'after the snapshot')`, fmt.Sprintf("n%d", i)))
	}
	require.NoError(t, held.Rollback(ctx))
	eventually(t, 60*time.Second, "a catch-up transaction committed", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1`, target) > 0
	})
	run.kill(t, db)
	sb := op.status(t, b)
	t.Logf("killed in phase %s with %d catch-up transactions", sb.Phase,
		countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1`, target))
	mustExec(t, db, `INSERT INTO notes VALUES ('n7', 'o1', 'while dead')`)
	run = startRunProc(t, db)
	sb2 := op.waitPhase(t, b, "ready")
	require.Equal(t, *sb.CandidateSlot, *sb2.CandidateSlot, "the catch-up resumes from the same permanent slot")
	for _, x := range xs {
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1 AND xid % 4294967296 = $2`, target, x),
			"each catch-up transaction exactly once")
	}

	// 3. Killed right after the activation.
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, b))
	run.kill(t, db)
	mustExec(t, db, `INSERT INTO notes VALUES ('n8', 'o1', 'after activation, while dead')`)
	_, err = pullRaw(db, "k", "owner:o1", cursor, 100)
	requireSQLState(t, err, "SY409")
	run = startRunProc(t, db)
	eventually(t, 60*time.Second, "ready on the new stream", func() bool { return r2Ready(t, db) })
	write(t, db, `INSERT INTO notes VALUES ('n9', 'o1', 'sentinel')`)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2)`, oldSlot, *sa.CandidateSlot))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`))
	for _, scope := range []string{"owner:o1", "user:u1"} {
		r, _, _ := onePageRebuild(t, db, "k2", scope)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
	}
	eventually(t, 30*time.Second, "the activated reset cleaned", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, b) == 1
	})
	run.kill(t, db)
}

// r2StopRunner cancels the in-process runner (what SIGTERM does to `synchro run`) and
// returns Run's result and how long it took.
func r2StopRunner(t *testing.T, e *syncEnv) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	err := e.rr.stop(t)
	return err, time.Since(start)
}

// TestResetEdgeStopWhileReady: a runner waiting for the operator in phase ready
// stops cleanly and promptly (CONTRACT.md, "The runner": SIGTERM, exit status 0), and
// the reset goes on with the next runner (here: aborted and cleaned up).
func TestResetEdgeStopWhileReady(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	op := newOperator(t, db)
	id := op.begin(t, "stop while ready")
	op.waitPhase(t, id, "ready")
	// Prompt: a stop that reached the drain bound (ShutdownTimeout) returns
	// ErrShutdownTimeout, not nil. Its time is logged, never asserted.
	err, took := r2StopRunner(t, e)
	t.Logf("stopped in %s", took)
	require.NoError(t, err)
	waitRunnerGone(t, db)
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	e.startRunner(t)
	eventually(t, 60*time.Second, "the aborted reset cleaned", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, id) == 1
	})
}

// TestResetEdgeStopWhileMarkerWaits (was a bug, fixed): CONTRACT.md, "The runner": "SIGTERM stops
// it cleanly after the transaction in hand, with exit status 0." A runner whose reset
// catch-up waits to write the coordinator's marker (an application transaction left
// open holds write_fence; docs/reset.md says the marker retries every 500 ms and lets
// pushes through meanwhile) has no transaction in hand, yet a stop is not honoured: it
// keeps retrying until ShutdownTimeout (60 s by default) cancels its work context, and
// Run then returns context.Canceled, which `synchro run` turns into exit status 1
// ("synchro run failed"). The existing TestResetNewCandidateAfterStagedBaseline discards
// exactly that error (`_ = e.rr.stop(t) // canceled while it waits for the marker's
// lock`). Cause: runner/reset.go, resetMark loops on 55P03 with sleep(ctx = work) and
// never looks at stop (resetCatchUp checks stop only between received messages); the
// loop (runner.go) then returns work.Err(). Fix: give resetMark the stop context and
// return (nil, no marker) when it is done between attempts; resetCatchUp then returns
// nil (the next start resumes the catch-up from the same candidate slot, unmarked).
func TestResetEdgeStopWhileMarkerWaits(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	op := newOperator(t, db)
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	id := op.begin(t, "stop while the marker waits")
	r2WaitMarkerBlocked(t, db, id)
	stopWhileResetWaits(t, e, op, id, "the marker waits", lock)
}

// stopWhileResetWaits stops e's runner while reset id waits on something held ends,
// ends held, and requires a clean (exit status 0) and prompt stop, and a reset the next
// runner takes to ready.
func stopWhileResetWaits(t *testing.T, e *syncEnv, op *operator, id, what string, held pgx.Tx) {
	t.Helper()
	err, took := r2StopRunner(t, e)
	t.Logf("stop while %s: Run returned %v after %s (ShutdownTimeout %s)", what, err, took, e.cfg.ShutdownTimeout)
	require.NoError(t, held.Rollback(context.Background()))
	waitRunnerGone(t, e.db)
	// The reset itself is unharmed: the next runner takes it to ready.
	e.startRunner(t)
	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	// Clean and prompt: a stop that reached the drain bound returns
	// ErrShutdownTimeout (no transaction is in hand to wait for).
	require.NoError(t, err, "a stop while %s must be clean (exit status 0)", what)
}

// TestResetEdgeStopWhileCandidateSlotWaits (was a bug, fixed): the same contract rule (SIGTERM:
// clean stop, exit status 0) while the reset's candidate slot is being created: slot
// creation waits for every transaction of the cluster that holds an xid (a long
// report, a forgotten psql session), so this is where a reset typically sits. The stop
// is not honoured until ShutdownTimeout cancels the work context; Run returns
// context.Canceled (exit status 1). docs/reset.md already defines what a death here
// means ("a death in staging before the rows are staged loses the exported snapshot, so
// the next start drops that candidate slot and makes a new one"), so stopping at once
// loses nothing. Cause: runner/reset.go, resetStage calls decode.CreateSlot under the
// work context, which only ShutdownTimeout cancels, and the loop returns work.Err().
// Fix: create the slot under a context that stop also cancels and return nil when stop
// is done.
func TestResetEdgeStopWhileCandidateSlotWaits(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	op := newOperator(t, db)
	blocker, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = blocker.Rollback(ctx) }()
	_, err = blocker.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	id := op.begin(t, "stop while the candidate slot waits")
	waitRunnerWaitsOnLock(t, db, "synchro-runner-replication")
	require.Equal(t, "staging", op.status(t, id).Phase)
	stopWhileResetWaits(t, e, op, id, "the candidate slot waits", blocker)
}

// TestResetEdgeBackToBack: a second reset begun right after the first activated
// (before the runner's cleanup of the first), and a third begun right after an abort
// (before the aborted candidate was dropped). Each reset keeps its own target
// generation, the cleanup of one never touches the stage of the next, and in the end
// exactly one slot of the database is left (the active one), the stream is ready, and
// clients rebuild to the live state.
func TestResetEdgeBackToBack(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	op := newOperator(t, db)
	a := op.begin(t, "first")
	op.waitPhase(t, a, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, a))
	b := op.begin(t, "second, before the first's cleanup")
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'between')`)
	sb := op.waitPhase(t, b, "ready")
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, b))
	c := op.begin(t, "third, before the second's candidate is dropped")
	mustExec(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'between')`)
	sc := op.waitPhase(t, c, "ready")
	require.NotEqual(t, *sb.CandidateSlot, *sc.CandidateSlot)
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, c))
	require.Equal(t, r2Target(t, db, c), r2Gen(t, db))
	write(t, db, `INSERT INTO notes VALUES ('n4', 'o1', 'after')`)
	eventually(t, 60*time.Second, "every reset cleaned, one slot left, ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE cleaned_at IS NULL`) == 0 &&
			countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`) == 1 &&
			r2Ready(t, db)
	})
	require.Equal(t, *sc.CandidateSlot, textOf(t, db, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`))
	rows, _ := fullRebuild(t, db, "x", "owner:o1", 100)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2", "notes/n3", "notes/n4"}, rowKeys(rows))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname IN ('synchro_reset', 'synchro_retired')`))
}

// TestResetEdgeRecoversMissingSlot: docs/runbook.md, readiness `slot`: "Missing,
// lost, foreign or moved past the processed boundary: the WAL the stream needs is
// gone; only a stream reset recovers." With the old stream's slot gone, a reset must
// reach ready and activate, and the new stream must carry on: rows written while the
// slot was missing are in the new baseline, later ones arrive by pull.
func TestResetEdgeRecoversMissingSlot(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	e.stopRunner(t)
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, runnerSlot(db))
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'while the slot is missing')`)
	op := newOperator(t, db)
	id := op.begin(t, "the stream's slot is gone")
	e.startRunner(t)
	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	rows, last := fullRebuild(t, db, "c", "owner:o1", 100)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2"}, rowKeys(rows))
	write(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'after')`)
	changes, _ := pullAll(t, db, "c", "owner:o1", last.Cursor, 100)
	require.Equal(t, []string{"upsert:notes/n3"}, opsOf(changes))
	eventually(t, 60*time.Second, "ready on the new stream", func() bool { return r2Ready(t, db) })
}

// TestResetEdgeAbortDuringStaging: abort_reset while the baseline rows are staged
// and their indexing waits (docs/sql/abort_reset.md: "any phase but activated and
// aborted"; the staged tables go at once, the candidate slot with the runner's cleanup,
// the old stream resumes as it was). The abort waits for the indexing chunk in hand,
// then nothing of the stage is left and the runner does not go on staging it.
func TestResetEdgeAbortDuringStaging(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	_, cursor := startScope(t, db, "c1", "owner:o1")
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `LOCK TABLE synchro.progress IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	op := newOperator(t, db)
	id := op.begin(t, "aborted while staging")
	eventually(t, 120*time.Second, "baseline rows staged", func() bool {
		s := op.status(t, id)
		return s.Phase == "staging" && s.ConsistentPoint != nil
	})
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	s := op.status(t, id)
	x := commitXid(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'during staging')`)
	aborted := make(chan error, 1)
	go func() { aborted <- op.exec(`SELECT synchro.abort_reset($1)`, id) }()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, held.Rollback(ctx))
	require.NoError(t, <-aborted)
	require.Equal(t, "aborted", op.status(t, id).Phase)
	waitXid(t, db, x)
	eventually(t, 60*time.Second, "the candidate dropped and the reset cleaned", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, *s.CandidateSlot) == 0 &&
			countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, id) == 1
	})
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname IN ('synchro_reset', 'synchro_retired')`))
	require.Equal(t, "aborted", op.status(t, id).Phase)
	changes, _ := pullAll(t, db, "c1", "owner:o1", cursor, 100)
	require.Equal(t, []string{"upsert:notes/n2"}, opsOf(changes))
	eventually(t, 60*time.Second, "ready again", func() bool { return r2Ready(t, db) })
}

// TestResetEdgeKilledAfterMarker: `synchro run` SIGKILLed after the coordinator's
// marker committed (barrier_xid recorded) and before the catch-up materialized it (the
// activation barrier not yet known). ADR 001: the restart resumes from the same
// permanent candidate slot and reaches the same marker: the barrier is that marker's
// end, writes committed before it are in the new baseline, writes after it arrive by
// pull in the new generation, each exactly once.
func TestResetEdgeKilledAfterMarker(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("needs the private cluster")
	}
	db := testdb.New(t)
	mustExec(t, db, syncSchema)
	ctx := context.Background()
	run := startRunProc(t, db)
	waitStream(t, db)
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	op := newOperator(t, db)

	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	id := op.begin(t, "killed after the marker")
	r2WaitMarkerBlocked(t, db, id)
	// Writes before the marker commits: before the barrier.
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'before the barrier')`)
	// The catch-up's next materialization waits for this lock (the staged tables take the
	// live names under an ACCESS EXCLUSIVE lock on synchro.progress).
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `LOCK TABLE synchro.progress IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	require.NoError(t, lock.Rollback(ctx))
	eventually(t, 60*time.Second, "the marker written", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND barrier_xid IS NOT NULL`, id) == 1
	})
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	require.Nil(t, op.status(t, id).ActivationBarrier)
	cand := *op.status(t, id).CandidateSlot
	run.kill(t, db)
	x3 := commitXid(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'after the barrier, while dead')`)
	require.NoError(t, held.Rollback(ctx))
	run = startRunProc(t, db)
	s := op.waitPhase(t, id, "ready")
	require.Equal(t, cand, *s.CandidateSlot, "resumed from the same candidate slot")
	// The barrier is the marker's end: n3 committed after it.
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, x3))
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	rows, last := fullRebuild(t, db, "c", "owner:o1", 100)
	keys := rowKeys(rows)
	require.Subset(t, keys, []string{"notes/n1", "notes/n2"})
	waitXid(t, db, x3)
	changes, _ := pullAll(t, db, "c", "owner:o1", last.Cursor, 100)
	all := append(keys, func() []string {
		out := []string{}
		for _, c := range changes {
			out = append(out, c.key())
		}
		return out
	}()...)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2", "notes/n3"}, all, "each row once, in the rebuild or the pull")
	run.kill(t, db)
}

// TestResetEdgeActivateRacesAbort: two operators, one activating and one aborting
// the same ready reset at once. Exactly one wins; the other waits for it and is
// refused with SY400 naming the phase (docs/sql/activate_reset.md,
// docs/sql/abort_reset.md); the outcome is consistent (an aborted reset never installs
// its stage, an activated one is never discarded).
func TestResetEdgeActivateRacesAbort(t *testing.T) {
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	gen := r2Gen(t, db)
	a := r2RoleConn(t, db, "synchro_operator")
	b := r2RoleConn(t, db, "synchro_operator")
	op := newOperator(t, db)

	// Abort first: the activation waits, then is refused; nothing is installed.
	id := op.begin(t, "abort wins")
	op.waitPhase(t, id, "ready")
	txa, err := a.Begin(ctx)
	require.NoError(t, err)
	_, err = txa.Exec(ctx, `SELECT synchro.abort_reset($1)`, id)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r2Exec(b, `SELECT synchro.activate_reset($1)`, id) }()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, txa.Commit(ctx))
	pe := requireSQLState(t, <-done, "SY400")
	require.Contains(t, pe.Message, "aborted")
	require.Equal(t, gen, r2Gen(t, db))
	eventually(t, 60*time.Second, "the aborted reset cleaned", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE reset_id = $1 AND cleaned_at IS NOT NULL`, id) == 1
	})

	// Activation first: the abort waits, then is refused; the new stream stays.
	id2 := op.begin(t, "activation wins")
	op.waitPhase(t, id2, "ready")
	txa, err = a.Begin(ctx)
	require.NoError(t, err)
	_, err = txa.Exec(ctx, `SELECT synchro.activate_reset($1)`, id2)
	require.NoError(t, err)
	go func() { done <- r2Exec(b, `SELECT synchro.abort_reset($1)`, id2) }()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, txa.Commit(ctx))
	pe = requireSQLState(t, <-done, "SY400")
	require.Contains(t, pe.Message, "activated")
	require.Equal(t, r2Target(t, db, id2), r2Gen(t, db))
	write(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'after')`)
	rows, _ := fullRebuild(t, db, "c", "owner:o1", 100)
	require.ElementsMatch(t, []string{"notes/n1", "notes/n2"}, rowKeys(rows))
}

const docsByOwnerLive = `
SELECT 'docs', d.id, rv.version, to_jsonb(d)::text
  FROM docs d JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'docs') AND rv.pk = d.id
 WHERE 'doc:' || d.owner = $1`

// A registry activation and a stream reset race (docs/bootstrap.md: no activation while
// a reset is open; any isolation level). Found by review 2026-12-05: begin_reset took no
// registry lock, so (a) an activation at REPEATABLE READ whose snapshot predated the
// reset read "no reset open" and went through, and its new table's 20 rows were in
// neither stream (a rebuild after the reset held 1 of 21, readiness green, nothing
// quarantined); (b) an activation still uncommitted when the reset began failed the
// reset's staging (23502). Now (a) fails with 40001 and goes through once the reset is
// over, and (b)'s begin_reset waits for the activation's commit; both end with every
// live row in the scope.
func TestResetRacesRegistryActivation(t *testing.T) {
	// Not parallel: a reset's exported snapshot waits for every xid-holding transaction.
	ctx := context.Background()
	const docs = `CREATE TABLE docs (id text PRIMARY KEY, owner text, body text);
		INSERT INTO docs SELECT 'd' || i, 'o1', 'pre' FROM generate_series(1, 20) i;
		GRANT SELECT ON docs TO synchro_operator;`
	requireAllDocs := func(t *testing.T, db *testdb.DB) {
		mustExec(t, db, `INSERT INTO docs VALUES ('late', 'o1', 'after')`)
		var got replica
		eventually(t, 60*time.Second, "a rebuild of doc:o1 with the late row", func() bool {
			p, err := rebuildRaw(db, "c1", "doc:o1", "", 10000)
			if err != nil {
				return false
			}
			got = replica{}
			got.applyRebuild(t, p.Rows)
			_, ok := got["docs/late"]
			return ok
		})
		require.Equal(t, 21, len(got), "every live row of docs")
		requireReplica(t, liveScope(t, db, docsByOwnerLive, "doc:o1"), got, "after the reset")
		requireNoQuarantine(t, db)
	}

	t.Run("repeatable read activation", func(t *testing.T) {
		e := newSyncEnv(t, docs+`
			SELECT synchro.register_table('docs', 'docs');
			SELECT synchro.add_scope_rule('docs', 'doc:', 'owner');`)
		db := e.db
		late := newOperator(t, db)
		tx, err := late.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var one int
		require.NoError(t, tx.QueryRow(ctx, `SELECT 1`).Scan(&one)) // the snapshot

		op := newOperator(t, db)
		id := op.begin(t, "race")
		op.waitPhase(t, id, "ready")
		_, err = tx.Exec(ctx, `SELECT synchro.activate_registry()`)
		requireSQLState(t, err, "40001")
		require.NoError(t, tx.Rollback(ctx))

		require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
		require.NoError(t, op.exec(`SELECT synchro.activate_registry()`), "retried once the reset is over")
		requireAllDocs(t, db)
	})

	t.Run("activation in flight", func(t *testing.T) {
		e := newSyncEnv(t, docs)
		db := e.db
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT synchro.register_table('docs', 'docs');
			SELECT synchro.add_scope_rule('docs', 'doc:', 'owner');
			SELECT synchro.activate_registry();`)
		require.NoError(t, err)

		op := newOperator(t, db)
		begun := make(chan string, 1)
		go func() {
			var id string
			if err := op.conn.QueryRow(ctx, `SELECT synchro.begin_reset('race')::text`).Scan(&id); err != nil {
				id = "error: " + err.Error()
			}
			begun <- id
		}()
		select {
		case id := <-begun:
			t.Fatalf("begin_reset returned while an activation was in flight: %s", id)
		case <-time.After(2 * time.Second):
		}
		require.NoError(t, tx.Commit(ctx))
		var id string
		select {
		case id = <-begun:
		case <-time.After(30 * time.Second):
			t.Fatal("begin_reset did not return after the activation committed")
		}
		require.NotContains(t, id, "error")
		op.waitPhase(t, id, "ready")
		require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
		requireAllDocs(t, db)
	})
}

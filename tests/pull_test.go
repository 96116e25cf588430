package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// Pull (CONTRACT.md "Pull"), with the runner running in-process.

// syncSchema: tasks (int8 keys) belong to "user:<user_id>" through project_members and
// to "owner:<owner>" and (no rule yet) nothing through reviewer; notes (text keys)
// belong to "owner:<owner>".
const syncSchema = `
CREATE TABLE project_members (id int8 PRIMARY KEY, project_id int8 NOT NULL, user_id text NOT NULL);
CREATE TABLE tasks (id int8 PRIMARY KEY, project_id int8, owner text, reviewer text, title text, v int NOT NULL DEFAULT 0);
CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
SELECT synchro.register_dependency('project_members', ARRAY['project_id', 'user_id']::name[]);
SELECT synchro.register_table('tasks', 'tasks');
SELECT synchro.register_table('notes', 'notes');
SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'project_members', 'project_id', 'user_id');
SELECT synchro.add_scope_rule('tasks', 'owner:', 'owner');
SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
SELECT synchro.activate_registry();`

// liveScopeSQL is a scope's state computed from the live tables: table, key text,
// version and the registered columns' image (every column is registered).
const liveScopeSQL = `
SELECT 'notes', n.id, rv.version, to_jsonb(n)::text
  FROM notes n JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'notes') AND rv.pk = n.id
 WHERE 'owner:' || n.owner = $1
UNION ALL
SELECT 'tasks', t.id::text, rv.version, to_jsonb(t)::text
  FROM tasks t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1
    OR EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = t.project_id AND 'user:' || m.user_id = $1)`

// syncEnv is a database with syncSchema and a running runner.
type syncEnv struct {
	db  *testdb.DB
	cfg runner.Config
	rr  *runningRunner
}

func newSyncEnv(t *testing.T, extra string) *syncEnv {
	t.Helper()
	return newSyncEnvSchema(t, syncSchema+"\n"+extra)
}

// newSyncEnvSchema is a database with schema (and its rows as the baseline) and a
// running runner.
func newSyncEnvSchema(t *testing.T, schema string) *syncEnv {
	t.Helper()
	db := testdb.New(t)
	mustExec(t, db, schema)
	cfg := testRunnerConfig(t, db)
	cfg.PollInterval = 5 * time.Millisecond
	// Warnings only: debug logs of hundreds of transactions cost more than the test.
	w := &testLogWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := &syncEnv{db: db, cfg: cfg, rr: startRunner(t, cfg)}
	waitStream(t, db)
	return e
}

// restart starts a new runner after stop.
func (e *syncEnv) stopRunner(t *testing.T) {
	t.Helper()
	require.NoError(t, e.rr.stop(t))
	waitRunnerGone(t, e.db)
}

func (e *syncEnv) startRunner(t *testing.T) {
	t.Helper()
	e.rr = startRunner(t, e.cfg)
}

// commitXid runs sql in one transaction and returns its xid as the runner records it.
func commitXid(t *testing.T, db *testdb.DB, sql string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, sql, args...)
	require.NoError(t, err, sql)
	var xid int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint % 4294967296`).Scan(&xid))
	require.NoError(t, tx.Commit(ctx))
	return xid
}

// waitXid waits until the runner materialized the source transaction xid.
func waitXid(t *testing.T, db *testdb.DB, xid int64) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("materialization of xid %d", xid), func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 = $1`, xid) > 0
	}, func() {
		// What the stream was stuck on.
		logClusterActivity(t, db, "waiting for a materialization")
		for _, q := range []string{
			`SELECT row_to_json(r)::text FROM synchro.runner r`,
			`SELECT row_to_json(p)::text FROM synchro.progress p`,
			`SELECT row_to_json(b)::text FROM synchro.bootstrap_status b`,
			`SELECT row_to_json(q)::text FROM (SELECT commit_lsn, class FROM synchro.quarantine) q`,
			`SELECT check_name || ' ' || ok || ' ' || detail FROM synchro.readiness()`,
		} {
			rows, err := db.Pool.Query(context.Background(), q)
			if err != nil {
				t.Logf("%s: %v", q, err)
				continue
			}
			for rows.Next() {
				var line string
				if rows.Scan(&line) == nil {
					t.Logf("stream state: %s", line)
				}
			}
			rows.Close()
		}
	})
}

// write runs sql in one transaction and waits for its materialization.
func write(t *testing.T, db *testdb.DB, sql string, args ...any) {
	t.Helper()
	waitXid(t, db, commitXid(t, db, sql, args...))
}

// change is one pull change.
type change struct {
	Table   string          `json:"table"`
	PK      json.RawMessage `json:"pk"`
	Op      string          `json:"op"`
	Version string          `json:"version"`
	Row     json.RawMessage `json:"row"`
}

func (c change) key() string { return c.Table + "/" + pkText(c.PK) }

func (c change) String() string { return c.Op + ":" + c.key() }

type pullPage struct {
	Changes []change `json:"changes"`
	Cursor  string   `json:"cursor"`
	HasMore bool     `json:"has_more"`
}

// pkText is the canonical key text of a JSON key: the string, or the number's digits.
func pkText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// nullable maps "" to SQL NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func callJSON(db *testdb.DB, out any, sql string, args ...any) error {
	var raw []byte
	if err := db.Pool.QueryRow(context.Background(), sql, args...).Scan(&raw); err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(out)
}

// pullRaw calls synchro.pull; cursor "" is NULL.
func pullRaw(db *testdb.DB, clientID, scope, cursor string, max int) (pullPage, error) {
	var p pullPage
	err := callJSON(db, &p, `SELECT synchro.pull($1, $2, $3, $4)::text`, clientID, scope, nullable(cursor), max)
	return p, err
}

func mustPull(t *testing.T, db *testdb.DB, clientID, scope, cursor string, max int) pullPage {
	t.Helper()
	p, err := pullRaw(db, clientID, scope, cursor, max)
	require.NoError(t, err)
	require.LessOrEqual(t, len(p.Changes), max)
	require.NotEmpty(t, p.Cursor)
	return p
}

// pullAll pulls pages of max changes until has_more is false; returns the changes and
// the final cursor. Every page but the last is full.
func pullAll(t *testing.T, db *testdb.DB, clientID, scope, cursor string, max int) ([]change, string) {
	t.Helper()
	var all []change
	for {
		p := mustPull(t, db, clientID, scope, cursor, max)
		all = append(all, p.Changes...)
		cursor = p.Cursor
		if !p.HasMore {
			return all, cursor
		}
		require.Len(t, p.Changes, max, "a has_more page is full")
	}
}

// rebuild pages.
type rebuildRow struct {
	Table   string          `json:"table"`
	PK      json.RawMessage `json:"pk"`
	Version string          `json:"version"`
	Row     json.RawMessage `json:"row"`
}

func (r rebuildRow) key() string { return r.Table + "/" + pkText(r.PK) }

type rebuildPage struct {
	Session  string       `json:"session"`
	Rows     []rebuildRow `json:"rows"`
	HasMore  bool         `json:"has_more"`
	Checksum string       `json:"checksum"`
	Cursor   string       `json:"cursor"`
}

func rebuildRaw(db *testdb.DB, clientID, scope, session string, max int) (rebuildPage, error) {
	var p rebuildPage
	err := callJSON(db, &p, `SELECT synchro.rebuild($1, $2, $3, $4)::text`, clientID, scope, nullable(session), max)
	return p, err
}

func mustRebuildPage(t *testing.T, db *testdb.DB, clientID, scope, session string, max int) rebuildPage {
	t.Helper()
	p, err := rebuildRaw(db, clientID, scope, session, max)
	require.NoError(t, err)
	require.NotEmpty(t, p.Session)
	if p.HasMore {
		require.Len(t, p.Rows, max)
		require.Empty(t, p.Cursor)
		require.Empty(t, p.Checksum)
	} else {
		require.NotEmpty(t, p.Cursor)
		require.Len(t, p.Checksum, 64)
	}
	return p
}

// fullRebuild runs a whole rebuild session and returns the rows in delivery order and
// the last page.
func fullRebuild(t *testing.T, db *testdb.DB, clientID, scope string, max int) ([]rebuildRow, rebuildPage) {
	t.Helper()
	var rows []rebuildRow
	session := ""
	for {
		p := mustRebuildPage(t, db, clientID, scope, session, max)
		rows = append(rows, p.Rows...)
		if !p.HasMore {
			return rows, p
		}
		session = p.Session
	}
}

// replica is a client's state of one scope: key -> version and canonical image.
type replicaRow struct {
	Version string
	Row     string
}

type replica map[string]replicaRow

// canon renders a JSON value canonically (sorted keys, exact numbers).
func canon(t *testing.T, raw []byte) string {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	require.NoError(t, d.Decode(&v), "%s", raw)
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return string(out)
}

func (r replica) applyRebuild(t *testing.T, rows []rebuildRow) {
	for k := range r {
		delete(r, k)
	}
	for _, x := range rows {
		r[x.key()] = replicaRow{x.Version, canon(t, x.Row)}
	}
}

func (r replica) apply(t *testing.T, changes []change) {
	t.Helper()
	for _, c := range changes {
		switch c.Op {
		case "upsert":
			require.NotEmpty(t, c.Version)
			r[c.key()] = replicaRow{c.Version, canon(t, c.Row)}
		case "delete":
			require.Empty(t, c.Version)
			require.Empty(t, c.Row)
			delete(r, c.key())
		default:
			t.Fatalf("op %q", c.Op)
		}
	}
}

// liveScope is the scope's state from the live tables (query: table, pk, version, image
// with $1 the scope).
func liveScope(t *testing.T, db *testdb.DB, query, scope string) replica {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), query, scope)
	require.NoError(t, err)
	out := replica{}
	defer rows.Close()
	for rows.Next() {
		var table, pk, version, image string
		require.NoError(t, rows.Scan(&table, &pk, &version, &image))
		out[table+"/"+pk] = replicaRow{version, canon(t, []byte(image))}
	}
	require.NoError(t, rows.Err())
	return out
}

func requireReplica(t *testing.T, want, got replica, msg string) {
	t.Helper()
	if len(want) == len(got) {
		same := true
		for k, v := range want {
			if got[k] != v {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	var diff []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			diff = append(diff, "missing "+k)
		} else if g != v {
			diff = append(diff, fmt.Sprintf("differs %s: want %v got %v", k, v, g))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diff = append(diff, "extra "+k)
		}
	}
	sort.Strings(diff)
	t.Fatalf("%s: replica differs from the live state:\n%s", msg, strings.Join(diff, "\n"))
}

// startScope rebuilds a scope into a fresh replica and returns its cursor.
func startScope(t *testing.T, db *testdb.DB, clientID, scope string) (replica, string) {
	t.Helper()
	rows, last := fullRebuild(t, db, clientID, scope, 1000)
	r := replica{}
	r.applyRebuild(t, rows)
	return r, last.Cursor
}

func opsOf(changes []change) []string {
	out := []string{}
	for _, c := range changes {
		out = append(out, c.String())
	}
	return out
}

// 1. Seed 002: a transaction that began first but commits after a pull moved past a
// later one's commit still arrives by the next pull. Two real connections per lane, the
// runner running, 200 rounds on one database (4 parallel lanes of 50 rounds, each with
// its own scope, rows and connections, so the runner interleaves them).
func TestPullLateCommitRace(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	const lanes, rounds = 4, 50
	for lane := 0; lane < lanes; lane++ {
		t.Run(fmt.Sprintf("Lane%d", lane), func(t *testing.T) {
			t.Parallel()
			lateCommitLane(t, e.db, lane, rounds)
		})
	}
}

func lateCommitLane(t *testing.T, db *testdb.DB, lane, rounds int) {
	ctx := context.Background()
	scope := fmt.Sprintf("owner:race%d", lane)
	clientID := fmt.Sprintf("racer%d", lane)
	rep, cursor := startScope(t, db, clientID, scope)
	require.Empty(t, rep)

	// A holds its transaction on a connection of its own: the pool has max(4, cores)
	// connections, and four lanes each holding one pooled connection while pulling on
	// another would wait for ever once -parallel lets all four run at once.
	connA, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer connA.Close(context.WithoutCancel(ctx))

	// pullUntil pulls until a change of key k with op appears (or fails after minWait,
	// the floor of every wait: on a loaded machine one write once took more than 10 s
	// to become visible, and this waits ~400 times).
	pullUntil := func(round int, k, op string) []change {
		var got []change
		deadline := time.Now().Add(minWait)
		for {
			changes, next := pullAll(t, db, clientID, scope, cursor, 1000)
			rep.apply(t, changes)
			cursor = next
			got = append(got, changes...)
			for _, c := range changes {
				if c.key() == k && c.Op == op {
					return got
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s %s never arrived (got %v)", round, op, k, opsOf(got))
			}
			time.Sleep(3 * time.Millisecond)
		}
	}

	base := lane * 1000000
	lastInsert := 0
	for i := 0; i < rounds; i++ {
		// A: begins, writes X, holds. X varies: an insert, an update of an earlier X,
		// a delete of an earlier Y.
		xid := base + 1000 + i
		xSQL := fmt.Sprintf(`INSERT INTO tasks (id, owner, title) VALUES (%d, 'race%d', 'x%d')`, xid, lane, i)
		xKey, xOp, xUpdate := fmt.Sprintf("tasks/%d", xid), "upsert", ""
		switch {
		case i%5 == 4:
			victim := base + 100000 + i - 2
			xSQL = fmt.Sprintf(`DELETE FROM tasks WHERE id = %d`, victim)
			xKey, xOp = fmt.Sprintf("tasks/%d", victim), "delete"
		case i%3 == 1:
			target := lastInsert
			xSQL = fmt.Sprintf(`UPDATE tasks SET v = v + 1, title = 'updated%d' WHERE id = %d`, i, target)
			xKey, xUpdate = fmt.Sprintf("tasks/%d", target), fmt.Sprintf(`"updated%d"`, i)
		default:
			lastInsert = xid
		}
		txA, err := connA.Begin(ctx)
		require.NoError(t, err)
		tag, err := txA.Exec(ctx, xSQL)
		require.NoError(t, err)
		require.Equal(t, int64(1), tag.RowsAffected(), "round %d: %s", i, xSQL)

		// B: writes Y and commits; the client pulls until Y arrived, so its cursor is
		// past Y's commit.
		y := base + 100000 + i
		mustExec(t, db, fmt.Sprintf(`INSERT INTO tasks (id, owner, title) VALUES (%d, 'race%d', 'y%d')`, y, lane, i))
		pullUntil(i, fmt.Sprintf("tasks/%d", y), "upsert")
		// X is not visible yet: an insert absent, an update not applied, a delete still there.
		xr, ok := rep[xKey]
		require.Equal(t, xOp == "delete" || xUpdate != "", ok, "round %d: X must not be visible yet", i)
		if xUpdate != "" {
			require.NotContains(t, xr.Row, xUpdate, "round %d: X must not be visible yet", i)
		}

		// A commits; the next pulls deliver X.
		require.NoError(t, txA.Commit(ctx))
		pullUntil(i, xKey, xOp)
		if xUpdate != "" {
			require.Contains(t, rep[xKey].Row, xUpdate)
		}
	}
	requireReplica(t, liveScope(t, db, liveScopeSQL, scope), rep, "after the race rounds")
}

// 2. A row moving between scopes: a delete in the old scope only, an upsert in the
// new one; scopes that keep the row get an upsert (the row changed).
func TestPullRowMovesBetweenScopes(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		INSERT INTO project_members VALUES (1, 1, 'p1only'), (2, 2, 'p2only'), (3, 1, 'both'), (4, 2, 'both');
		INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'a', 'one'), (2, 1, 'a', 'two');`)
	db := e.db
	scopes := []string{"owner:a", "owner:b", "user:p1only", "user:p2only", "user:both"}
	cursors := map[string]string{}
	reps := map[string]replica{}
	for _, s := range scopes {
		reps[s], cursors[s] = startScope(t, db, "mover", s)
	}
	pullEach := func() map[string][]string {
		out := map[string][]string{}
		for _, s := range scopes {
			changes, cur := pullAll(t, db, "mover", s, cursors[s], 3)
			cursors[s] = cur
			reps[s].apply(t, changes)
			out[s] = opsOf(changes)
		}
		return out
	}

	t.Run("OwnerColumn", func(t *testing.T) {
		write(t, db, `UPDATE tasks SET owner = 'b' WHERE id = 1`)
		require.Equal(t, map[string][]string{
			"owner:a":     {"delete:tasks/1"},
			"owner:b":     {"upsert:tasks/1"},
			"user:p1only": {"upsert:tasks/1"},
			"user:p2only": {},
			"user:both":   {"upsert:tasks/1"},
		}, pullEach())
	})
	t.Run("ViaColumn", func(t *testing.T) {
		write(t, db, `UPDATE tasks SET project_id = 2 WHERE id = 2`)
		require.Equal(t, map[string][]string{
			"owner:a":     {"upsert:tasks/2"},
			"owner:b":     {},
			"user:p1only": {"delete:tasks/2"},
			"user:p2only": {"upsert:tasks/2"},
			"user:both":   {"upsert:tasks/2"},
		}, pullEach())
	})
	t.Run("OutOfEveryScope", func(t *testing.T) {
		write(t, db, `UPDATE tasks SET owner = NULL, project_id = NULL WHERE id = 1`)
		require.Equal(t, map[string][]string{
			"owner:a":     {},
			"owner:b":     {"delete:tasks/1"},
			"user:p1only": {"delete:tasks/1"},
			"user:p2only": {},
			"user:both":   {"delete:tasks/1"},
		}, pullEach())
	})
	for _, s := range scopes {
		requireReplica(t, liveScope(t, db, liveScopeSQL, s), reps[s], s)
	}
}

// dependencyEnv: project 1 has 50 tasks, project 2 has 56 (7 x 8); user v is a member of
// project 3 (one task), owner scopes hold every task.
func dependencyEnv(t *testing.T) *syncEnv {
	return newSyncEnv(t, `
		INSERT INTO project_members VALUES (100, 3, 'v');
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, 1, 'o', 't' || g FROM generate_series(1, 50) g;
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, 2, 'o', 't' || g FROM generate_series(91, 146) g;
		INSERT INTO tasks (id, project_id, owner, title) VALUES (200, 3, 'o', 'v''s');`)
}

// 3. A dependency change adding and removing 50 rows: 50 upserts, then 50 deletes in
// user:u, nothing in any other scope.
func TestPullDependencyChange(t *testing.T) {
	t.Parallel()
	e := dependencyEnv(t)
	db := e.db
	others := []string{"user:v", "owner:o", "user:w"}
	repU, curU := startScope(t, db, "dep", "user:u")
	require.Empty(t, repU)
	otherCur := map[string]string{}
	for _, s := range others {
		_, otherCur[s] = startScope(t, db, "dep", s)
	}
	var want []string
	for i := 1; i <= 50; i++ {
		want = append(want, fmt.Sprintf("upsert:tasks/%d", i))
	}

	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u')`)
	changes, curU := pullAll(t, db, "dep", "user:u", curU, 1000)
	require.Equal(t, want, opsOf(changes))
	repU.apply(t, changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "user:u"), repU, "after the insert")

	write(t, db, `DELETE FROM project_members WHERE id = 1`)
	changes, _ = pullAll(t, db, "dep", "user:u", curU, 1000)
	require.Len(t, changes, 50)
	for i, c := range changes {
		require.Equal(t, fmt.Sprintf("delete:tasks/%d", i+1), c.String())
	}
	repU.apply(t, changes)
	require.Empty(t, repU)

	for _, s := range others {
		changes, _ := pullAll(t, db, "dep", s, otherCur[s], 1000)
		require.Empty(t, changes, "scope %s", s)
	}
	require.Equal(t, 100, countOf(t, db, `SELECT count(*) FROM synchro.effect`),
		"the dependency changes made effects in user:u only")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE scope <> 'user:u'`))
}

// 4. Page boundaries inside one event's effects: 50 and 56 changes of one dependency
// row, 7 at a time: the union of the pages is the stream, in order, without repeats or
// gaps, and has_more is false on the last page also when it is full.
func TestPullPagesInsideOneEvent(t *testing.T) {
	t.Parallel()
	e := dependencyEnv(t)
	db := e.db
	_, cur := startScope(t, db, "pager", "user:u")
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u')`)
	write(t, db, `INSERT INTO project_members VALUES (2, 2, 'u')`)
	write(t, db, `DELETE FROM project_members WHERE id = 1`)

	// The stream, as stored: one event per transaction, effects in order.
	stored := func(from, to int) []string {
		rows, err := db.Pool.Query(context.Background(), `
			SELECT op || ':tasks/' || pk FROM synchro.effect WHERE scope = 'user:u'
			ORDER BY commit_lsn, event_ordinal, effect_ordinal`)
		require.NoError(t, err)
		all, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Len(t, all, 156)
		return all[from:to]
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(DISTINCT (commit_lsn, event_ordinal)) FROM synchro.effect
		WHERE scope = 'user:u' AND op = 'upsert' AND pk::int8 <= 50`), "50 effects of one event")

	type pageShape struct {
		n    int
		more bool
	}
	pageThrough := func(cursor string, total int) ([]change, string, []pageShape) {
		var all []change
		var shapes []pageShape
		for {
			p := mustPull(t, db, "pager", "user:u", cursor, 7)
			all = append(all, p.Changes...)
			shapes = append(shapes, pageShape{len(p.Changes), p.HasMore})
			cursor = p.Cursor
			if !p.HasMore {
				break
			}
			require.Less(t, len(all), total+7, "runaway paging")
		}
		return all, cursor, shapes
	}

	t.Run("FiftyInPagesOfSeven", func(t *testing.T) {
		// Only the first transaction is eligible from cur... the whole stream is, so
		// page through the first 50 by hand and check each page against the store.
		cursor := cur
		var got []change
		for page := 0; page < 8; page++ {
			p := mustPull(t, db, "pager", "user:u", cursor, 7)
			require.True(t, p.HasMore, "page %d", page)
			got = append(got, p.Changes...)
			cursor = p.Cursor
		}
		require.Equal(t, stored(0, 56), opsOf(got))
		for i := 0; i < 50; i++ {
			require.Equal(t, fmt.Sprintf("upsert:tasks/%d", i+1), got[i].String())
		}
	})
	t.Run("WholeStreamInPagesOfSeven", func(t *testing.T) {
		all, _, shapes := pageThrough(cur, 156)
		require.Equal(t, stored(0, 156), opsOf(all), "no repeats, no gaps, stream order")
		require.Len(t, shapes, 23) // 156 = 22 * 7 + 2
		require.Equal(t, pageShape{2, false}, shapes[22])
		seen := map[string]bool{}
		for _, c := range all {
			require.False(t, seen[c.String()], "repeated %s", c)
			seen[c.String()] = true
		}
	})
	t.Run("PagesAcrossAnEventBoundary", func(t *testing.T) {
		// From the end of the first transaction: the second holds exactly 56 = 7 x 8
		// changes. Pull up to its end: write nothing more, so take a cursor at the end of
		// the first transaction by paging 50 changes with a page of 50.
		p := mustPull(t, db, "pager", "user:u", cur, 50)
		require.True(t, p.HasMore)
		// p.Cursor is inside the stream, right after the 50th effect (the end of the
		// first event). The next 56 + 50 changes remain; take the 56 in pages of 7.
		var got []change
		cursor := p.Cursor
		for page := 0; page < 8; page++ {
			q := mustPull(t, db, "pager", "user:u", cursor, 7)
			require.Len(t, q.Changes, 7)
			got = append(got, q.Changes...)
			cursor = q.Cursor
		}
		require.Equal(t, stored(50, 106), opsOf(got))
	})
	t.Run("ExactMultipleAtTheEnd", func(t *testing.T) {
		// A fresh scope whose whole stream is one event of exactly 56 changes.
		_, c2 := startScope(t, db, "pager", "user:x")
		write(t, db, `INSERT INTO project_members VALUES (3, 2, 'x')`)
		var got []change
		var shapes []pageShape
		cursor := c2
		for {
			q := mustPull(t, db, "pager", "user:x", cursor, 7)
			got = append(got, q.Changes...)
			shapes = append(shapes, pageShape{len(q.Changes), q.HasMore})
			cursor = q.Cursor
			if !q.HasMore {
				break
			}
			require.Less(t, len(shapes), 10, "runaway paging")
		}
		want := []pageShape{}
		for i := 0; i < 7; i++ {
			want = append(want, pageShape{7, true})
		}
		want = append(want, pageShape{7, false})
		require.Equal(t, want, shapes, "the last page is full and has_more is false")
		require.Len(t, got, 56)
		for i, c := range got {
			require.Equal(t, fmt.Sprintf("upsert:tasks/%d", 91+i), c.String())
		}
		// The closing cursor is at the high-watermark: nothing more.
		q := mustPull(t, db, "pager", "user:x", cursor, 7)
		require.Empty(t, q.Changes)
		require.False(t, q.HasMore)
	})
}

// tamper changes one character in the middle of a token (still base64url).
func tamper(tok string) string {
	b := []byte(tok)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// 5. Every error case of pull and rebuild, and their order.
func TestPullErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `
		-- An authorizer by the rules (docs/security.md): SECURITY DEFINER, pinned
		-- search_path, owned by a role that is not a superuser nor the pack's owner.
		CREATE FUNCTION public.authz(client_id text, scope text) RETURNS boolean LANGUAGE sql
		SECURITY DEFINER SET search_path = pg_catalog, pg_temp
		AS $$ SELECT scope <> 'owner:denied' AND client_id <> 'banned' $$;
		ALTER FUNCTION public.authz(text, text) OWNER TO synchro_operator;
		SELECT synchro.set_scope_authorizer('public.authz(text, text)');
		INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one'), (2, 'a', 'two'), (3, 'b', 'three');`)
	db := e.db
	_, curA := startScope(t, db, "c1", "owner:a")
	_, curB := startScope(t, db, "c1", "owner:b")
	first := mustRebuildPage(t, db, "c1", "owner:a", "", 1)
	require.True(t, first.HasMore)

	t.Run("SY400", func(t *testing.T) {
		for _, tc := range []struct {
			name, scope, cursor string
			max                 int
		}{
			{"EmptyCursor", "owner:a", "", -1},
			{"Garbage", "owner:a", "garbage", 10},
			{"LongGarbage", "owner:a", strings.Repeat("Zm9v", 30), 10},
			{"NotBase64", "owner:a", strings.Repeat("!", 60), 10},
			{"OtherScope", "owner:b", curA, 10},
			{"Tampered", "owner:a", tamper(curA), 10},
			{"Truncated", "owner:a", curA[:len(curA)-1], 10},
			{"SessionAsCursor", "owner:a", first.Session, 10},
			{"MaxChangesZero", "owner:a", curA, 0},
			{"MaxChangesTooMany", "owner:a", curA, 10001},
			{"MaxChangesNegative", "owner:a", curA, -5},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var err error
				if tc.max == -1 { // the empty string, not NULL
					_, err = db.Pool.Exec(ctx, `SELECT synchro.pull('c1', $1, '', 10)`, tc.scope)
				} else {
					_, err = pullRaw(db, "c1", tc.scope, tc.cursor, tc.max)
				}
				pgErr := requireSQLState(t, err, "SY400")
				if len(tc.cursor) > 8 {
					require.NotContains(t, pgErr.Message, tc.cursor[:8], "the message carries no token")
				}
			})
		}
		_, err := pullRaw(db, "c1", "owner:a", curA, 1)
		require.NoError(t, err, "1 is in range")
		_, err = pullRaw(db, "c1", "owner:a", curA, 10000)
		require.NoError(t, err, "10000 is in range")

		for _, tc := range []struct {
			name, scope, session string
			max                  int
		}{
			{"MaxRowsZero", "owner:a", "", 0},
			{"MaxRowsTooMany", "owner:a", "", 10001},
			{"SessionGarbage", "owner:a", "garbage", 10},
			{"SessionTampered", "owner:a", tamper(first.Session), 10},
			{"SessionOtherScope", "owner:b", first.Session, 10},
			{"CursorAsSession", "owner:a", curA, 10},
		} {
			t.Run("Rebuild"+tc.name, func(t *testing.T) {
				_, err := rebuildRaw(db, "c1", tc.scope, tc.session, tc.max)
				requireSQLState(t, err, "SY400")
			})
		}
		t.Run("RebuildEmptySession", func(t *testing.T) {
			_, err := db.Pool.Exec(ctx, `SELECT synchro.rebuild('c1', 'owner:a', '', 10)`)
			requireSQLState(t, err, "SY400")
		})
		_, err = rebuildRaw(db, "c1", "owner:a", "", 10000)
		require.NoError(t, err)
	})

	t.Run("SY403", func(t *testing.T) {
		_, err := pullRaw(db, "c1", "owner:denied", curA, 10)
		requireSQLState(t, err, "SY400") // bound to owner:a: misbound comes first
		_, denied := rebuildRaw(db, "c1", "owner:denied", "", 10)
		requireSQLState(t, denied, "SY403")
		_, err = pullRaw(db, "banned", "owner:a", curA, 10)
		requireSQLState(t, err, "SY403")
		_, err = rebuildRaw(db, "banned", "owner:a", first.Session, 10)
		requireSQLState(t, err, "SY403")

		t.Run("MalformedBeforeRefused", func(t *testing.T) {
			_, err := pullRaw(db, "c1", "owner:denied", "garbage", 10)
			requireSQLState(t, err, "SY400")
			_, err = pullRaw(db, "banned", "owner:a", tamper(curA), 10)
			requireSQLState(t, err, "SY400")
			_, err = pullRaw(db, "banned", "owner:a", curA, 0)
			requireSQLState(t, err, "SY400")
			_, err = rebuildRaw(db, "banned", "owner:a", "garbage", 10)
			requireSQLState(t, err, "SY400")
		})
		t.Run("RefusedBeforeNullCursor", func(t *testing.T) {
			_, err := pullRaw(db, "c1", "owner:denied", "", 10)
			requireSQLState(t, err, "SY403")
			_, err = pullRaw(db, "banned", "owner:a", "", 10)
			requireSQLState(t, err, "SY403")
		})
		t.Run("AllowedClient", func(t *testing.T) {
			_, err := pullRaw(db, "c2", "owner:a", curA, 10)
			require.NoError(t, err)
		})
	})

	t.Run("SY409NullCursor", func(t *testing.T) {
		_, err := pullRaw(db, "c1", "owner:a", "", 10)
		requireSQLState(t, err, "SY409")
	})
	_ = curB
}

// SY409 after a membership-rule change of the cursor's prefix, while the runner runs:
// old cursors and sessions of that prefix are stale, other prefixes keep working, and
// a rebuild serves the new rules.
func TestPullRuleChangeMakesCursorsStale(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		INSERT INTO project_members VALUES (1, 1, 'u');
		INSERT INTO tasks (id, project_id, owner, reviewer, title) VALUES
		  (1, 1, 'u', NULL, 'mine'), (2, NULL, 'x', 'u', 'to review'), (3, NULL, 'x', NULL, 'other');`)
	db := e.db
	_, curOwner := startScope(t, db, "rc", "owner:u")
	_, curUser := startScope(t, db, "rc", "user:u")
	session := mustRebuildPage(t, db, "rc", "owner:u", "", 1).Session

	write(t, db, `SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer'); SELECT synchro.activate_registry();`)

	_, err := pullRaw(db, "rc", "owner:u", curOwner, 10)
	requireSQLState(t, err, "SY409")
	_, err = rebuildRaw(db, "rc", "owner:u", session, 10)
	requireSQLState(t, err, "SY409")
	_, err = pullRaw(db, "rc", "user:u", curUser, 10)
	require.NoError(t, err, "another prefix is unaffected")

	rep, cur := startScope(t, db, "rc", "owner:u")
	require.ElementsMatch(t, []string{"tasks/1", "tasks/2"}, keysOf(rep), "the rebuild serves the new rules")
	write(t, db, `UPDATE tasks SET reviewer = 'u' WHERE id = 3`)
	changes, _ := pullAll(t, db, "rc", "owner:u", cur, 10)
	require.Equal(t, []string{"upsert:tasks/3"}, opsOf(changes))
}

// A scope's cursors follow the rules that govern it now, whatever prefixes came before:
// a prefix whose rules were removed keeps its row (so the cursors of its scopes went
// stale then), and once a shorter prefix governs those scopes, a change of the shorter
// prefix's rules must make their cursors stale too. The removed longer prefix's row
// answered for them instead, and a cursor bound before the change kept pulling over a
// membership the change re-evaluated without pull effects: the rows the new rules
// brought in never arrived.
func TestPullCursorStaleAfterShorterPrefixRuleChange(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO notes (id, owner, body) VALUES ('x:1', 'a', 'one'), ('n2', 'a', 'x:1');`)
	db := e.db
	// Generation 2: the longer prefix team:x: (notes by body).
	write(t, db, `SELECT synchro.add_scope_rule('notes', 'team:x:', 'body'); SELECT synchro.activate_registry();`)
	// Generation 3: team:x: is gone, team: (notes by body) governs team:x:1.
	write(t, db, `SELECT synchro.remove_scope_rules('notes'); SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.add_scope_rule('notes', 'team:', 'body'); SELECT synchro.activate_registry();`)
	rep, cur := startScope(t, db, "tp", "team:x:1")
	require.Equal(t, []string{"notes/n2"}, keysOf(rep), "team: by body")
	// Generation 4: team: by id instead.
	write(t, db, `SELECT synchro.remove_scope_rules('notes'); SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.add_scope_rule('notes', 'team:', 'id'); SELECT synchro.activate_registry();`)
	_, err := pullRaw(db, "tp", "team:x:1", cur, 10)
	requireSQLState(t, err, "SY409")
	rep, _ = startScope(t, db, "tp", "team:x:1")
	require.Equal(t, []string{"notes/x:1"}, keysOf(rep), "the rebuild serves the new rules")
}

// A rebuild between a rule change's activation and its materialization must not hand
// out a cursor of the new rule generation over the old membership: pulling from it would
// never deliver the rows the new rule adds (re-evaluation makes no pull effects).
func TestPullRuleChangeBeforeMaterialization(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, reviewer, title) VALUES (1, 'u', NULL, 'mine'), (2, 'x', 'u', 'to review');`)
	db := e.db
	e.stopRunner(t)
	mustExec(t, db, `SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer'); SELECT synchro.activate_registry();`)
	rows, last, err := func() ([]rebuildRow, rebuildPage, error) {
		p, err := rebuildRaw(db, "early", "owner:u", "", 1000)
		return p.Rows, p, err
	}()
	e.startRunner(t)
	if err != nil {
		// Refusing until the rule change is materialized is one correct answer.
		requireSQLState(t, err, "SY503")
		eventually(t, 10*time.Second, "rebuild after the rule change", func() bool {
			_, err := rebuildRaw(db, "early", "owner:u", "", 1000)
			return err == nil
		})
		return
	}
	rep := replica{}
	rep.applyRebuild(t, rows)
	// Wait for the activation to be materialized, then pull to the end.
	eventually(t, 10*time.Second, "the activation to be materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.progress p
			WHERE p.registry_generation = (SELECT max(generation) FROM synchro.registry_generation WHERE state = 'active')`) == 1
	})
	changes, _ := pullAll(t, db, "early", "owner:u", last.Cursor, 100)
	rep.apply(t, changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL+` OR 'owner:' || t.reviewer = $1`, "owner:u"), rep,
		"a rebuild taken before the rule change was materialized, then pulled to the end")
}

func keysOf(r replica) []string {
	out := []string{}
	for k := range r {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SY409 below the retention horizon after compact('0 seconds'); rebuild keeps working
// and a replayed push returns its recorded outcome without writing.
func TestPullRetentionHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one');`)
	db := e.db
	rep, cur0 := startScope(t, db, "ret", "owner:a")

	var ver string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version FROM synchro.row_version WHERE pk = '1'`).Scan(&ver))
	muts := fmt.Sprintf(`[{"id": "00000000-0000-4000-8000-000000000001", "table": "tasks", "op": "update", "pk": 1,
		"base_version": %q, "row": {"title": "pushed"}}]`, ver)
	var outcome string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.push('ret', $1::jsonb)::text`, muts).Scan(&outcome))
	require.Contains(t, outcome, `"accepted"`)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'a', 'two'), (3, 'a', 'three')`)

	mid := mustPull(t, db, "ret", "owner:a", cur0, 1)
	require.True(t, mid.HasMore)
	changes, curEnd := pullAll(t, db, "ret", "owner:a", cur0, 100)
	require.Len(t, changes, 3)
	rep.apply(t, changes)

	var res map[string]any
	require.NoError(t, callJSON(db, &res, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 3, res["deleted_effects"], "%v", res)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect`))

	_, err := pullRaw(db, "ret", "owner:a", cur0, 10)
	requireSQLState(t, err, "SY409")
	_, err = pullRaw(db, "ret", "owner:a", mid.Cursor, 10)
	requireSQLState(t, err, "SY409")
	// Tampered stays SY400 even below the horizon.
	_, err = pullRaw(db, "ret", "owner:a", tamper(cur0), 10)
	requireSQLState(t, err, "SY400")
	// A cursor at the horizon's transaction end lost nothing.
	p := mustPull(t, db, "ret", "owner:a", curEnd, 10)
	require.Empty(t, p.Changes)

	// Rebuild works and continues by pull.
	rep2, cur := startScope(t, db, "ret", "owner:a")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), rep2, "rebuild after compaction")
	requireReplica(t, rep2, rep, "the pulled replica")
	write(t, db, `DELETE FROM tasks WHERE id = 2`)
	changes, _ = pullAll(t, db, "ret", "owner:a", cur, 10)
	require.Equal(t, []string{"delete:tasks/2"}, opsOf(changes))

	// Push outcomes are unaffected: the replay returns the recorded outcome byte for
	// byte and writes nothing.
	var before, after string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version || title FROM synchro.row_version v JOIN tasks t ON t.id::text = v.pk WHERE t.id = 1`).Scan(&before))
	var replay string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.push('ret', $1::jsonb)::text`, muts).Scan(&replay))
	require.Equal(t, outcome, replay)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version || title FROM synchro.row_version v JOIN tasks t ON t.id::text = v.pk WHERE t.id = 1`).Scan(&after))
	require.Equal(t, before, after)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE coverage IS NULL`))
}

// SY503: a client with an accepted, unmaterialized push gets capture_pending from pull
// and rebuild and nothing advances; another client is unaffected; after materialization
// the client sees its write.
func TestPullCapturePending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `
		-- An authorizer by the rules (docs/security.md): SECURITY DEFINER, pinned
		-- search_path, owned by a role that is not a superuser nor the pack's owner.
		CREATE FUNCTION public.authz(client_id text, scope text) RETURNS boolean LANGUAGE sql
		SECURITY DEFINER SET search_path = pg_catalog, pg_temp
		AS $$ SELECT scope <> 'owner:denied' $$;
		ALTER FUNCTION public.authz(text, text) OWNER TO synchro_operator;
		SELECT synchro.set_scope_authorizer('public.authz(text, text)');
		INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one');`)
	db := e.db
	_, cur := startScope(t, db, "pusher", "owner:a")
	_, curB2 := startScope(t, db, "other", "owner:b")
	e.stopRunner(t)

	var outcome string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.push('pusher', $1::jsonb)::text`,
		`[{"id": "00000000-0000-4000-8000-0000000000aa", "table": "tasks", "op": "insert", "pk": 7, "row": {"owner": "a", "title": "pushed"}}]`).Scan(&outcome))
	require.Contains(t, outcome, `"accepted"`)

	_, err := pullRaw(db, "pusher", "owner:a", cur, 10)
	requireSQLState(t, err, "SY503")
	_, err = pullRaw(db, "pusher", "owner:b", curB2, 10)
	requireSQLState(t, err, "SY503") // per client, whatever the scope
	_, err = rebuildRaw(db, "pusher", "owner:a", "", 10)
	requireSQLState(t, err, "SY503")
	// Order: SY400, SY403 and SY409 come first.
	_, err = pullRaw(db, "pusher", "owner:a", "garbage", 10)
	requireSQLState(t, err, "SY400")
	_, err = pullRaw(db, "pusher", "owner:denied", "", 10)
	requireSQLState(t, err, "SY403")
	_, err = pullRaw(db, "pusher", "owner:a", "", 10)
	requireSQLState(t, err, "SY409")

	// Another client is unaffected (and sees nothing yet).
	p := mustPull(t, db, "other", "owner:a", cur, 10)
	require.Empty(t, p.Changes)
	require.False(t, p.HasMore)

	e.startRunner(t)
	var got pullPage
	eventually(t, 10*time.Second, "the pusher's pull", func() bool {
		got, err = pullRaw(db, "pusher", "owner:a", cur, 10)
		if err != nil {
			requireSQLState(t, err, "SY503")
			return false
		}
		return true
	})
	require.Equal(t, []string{"upsert:tasks/7"}, opsOf(got.Changes), "the old cursor did not advance")
	require.JSONEq(t, `{"id": 7, "owner": "a", "reviewer": null, "title": "pushed", "project_id": null, "v": 0}`, string(got.Changes[0].Row))
	_, err = rebuildRaw(db, "pusher", "owner:a", "", 10)
	require.NoError(t, err)
}

package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/msgauth"
	"github.com/synchro/synchro/tests/testdb"
)

// Issue 13, items 3, 4 and 6: no stranger and no value PostgreSQL accepted stops the
// stream, and the runner is bounded by bytes. The attacker is an application login in
// synchro_app that owns its schema and its registered table, as applications commonly
// do; it may write its table and run pg_logical_emit_message (PUBLIC may).

// appEnv is a database with an application role owning schema app, a running runner
// whose logs are kept (to grep them for sentinels), and a pool connected as the role.
type appEnv struct {
	db   *testdb.DB
	role string
	app  *pgxpool.Pool
	rr   *runningRunner
	logs *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newAppEnv creates the role and its schema, runs ddl as the role (its tables), then
// registry as the operator (the test's superuser), and starts a runner configured by
// tune (nil: the test defaults).
func newAppEnv(t *testing.T, ddl, registry string, tune func(*runner.Config)) *appEnv {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	role := "app_" + strings.ToLower(randomToken(t))
	mustExec(t, db, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'app-pw' IN ROLE synchro_app`, role))
	t.Cleanup(func() {
		// Roles are cluster-wide: leave nothing behind (best effort; a failed test
		// keeps its database, and with it what the role owns).
		if c, err := pgx.Connect(context.Background(), db.URL); err == nil {
			_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %s CASCADE`, role))
			_, _ = c.Exec(context.Background(), fmt.Sprintf(`DROP ROLE %s`, role))
			_ = c.Close(context.Background())
		}
	})
	mustExec(t, db, fmt.Sprintf(`CREATE SCHEMA app AUTHORIZATION %s`, role))
	mustExec(t, db, fmt.Sprintf(`SET ROLE %s; %s; RESET ROLE`, role, ddl))
	mustExec(t, db, registry)

	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.ConnConfig.User = role
	pc.ConnConfig.Password = "app-pw"
	app, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(app.Close)

	logs := &lockedBuffer{}
	cfg := testRunnerConfig(t, db)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if tune != nil {
		tune(&cfg)
	}
	e := &appEnv{db: db, role: role, app: app, logs: logs}
	e.rr = startRunner(t, cfg)
	waitStream(t, db)
	return e
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// appExec runs sql as the application role.
func (e *appEnv) appExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := e.app.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// appFails runs sql as the application role and returns its PostgreSQL error.
func (e *appEnv) appFails(t *testing.T, sql string, args ...any) *pgconn.PgError {
	t.Helper()
	_, err := e.app.Exec(context.Background(), sql, args...)
	require.Error(t, err, sql)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "not a PostgreSQL error: %v", err)
	return pgErr
}

// requireHealthy checks that no poison was recorded and the stream materialized
// everything written so far: a final write by the application shows up as an effect.
func (e *appEnv) requireHealthy(t *testing.T, finalWrite string, finalPK string) {
	t.Helper()
	e.appExec(t, finalWrite)
	eventually(t, 60*time.Second, "the final write's effect", func() bool {
		if len(quarantines(t, e.db)) > 0 {
			t.Fatalf("stream quarantined: %+v", quarantines(t, e.db))
		}
		return countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = $1`, finalPK) > 0
	})
	require.Empty(t, quarantines(t, e.db))
	require.Equal(t, 0.0, e.rr.counter(t, "synchro_runner_poison_total"))
}

// requireNoSentinel checks that sentinel appears in no synchro table (projection and
// effect included: it belongs to refused writes only), no runner log line and no
// error field.
func (e *appEnv) requireNoSentinel(t *testing.T, sentinel string, errs ...*pgconn.PgError) {
	t.Helper()
	ctx := context.Background()
	rows, err := e.db.Pool.Query(ctx, `SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind = 'r'`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, tables)
	for _, tbl := range tables {
		n := countOf(t, e.db, fmt.Sprintf(`SELECT count(*) FROM synchro.%s x WHERE strpos(x::text, $1) > 0`,
			pgx.Identifier{tbl}.Sanitize()), sentinel)
		require.Zero(t, n, "sentinel in synchro.%s", tbl)
	}
	require.NotContains(t, e.logs.String(), sentinel, "sentinel in the runner's logs")
	for _, pe := range errs {
		for _, f := range []string{pe.Message, pe.Detail, pe.Hint, pe.Where, pe.InternalQuery, pe.ColumnName,
			pe.ConstraintName, pe.DataTypeName, pe.TableName, pe.SchemaName} {
			require.NotContains(t, f, sentinel, "sentinel in an error field")
		}
	}
}

// requireIgnored: the runner ignored n messages for reason, exactly, unless a session
// read the stream again from the acknowledged position (reread, or a reconnect on a
// loaded machine): then at least n, since the collator counts what it reads again.
func (e *appEnv) requireIgnored(t *testing.T, reason string, n float64, reread bool) {
	t.Helper()
	got := e.rr.counter(t, "synchro_runner_ignored_messages_total", "reason", reason)
	if reread || e.rr.counter(t, "synchro_runner_reconnects_total") > 0 {
		require.GreaterOrEqual(t, got, n, reason)
		return
	}
	require.Equal(t, n, got, reason)
}

func (e *appEnv) relationID(t *testing.T, tableID string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, e.db.Pool.QueryRow(context.Background(),
		`SELECT relation_id FROM synchro.relation WHERE table_id = $1`, tableID).Scan(&id))
	return id
}

const appItemsDDL = `CREATE TABLE app.items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0, extra json)`

const appItemsRegistry = `
	SELECT synchro.register_table('app.items', 'items', ARRAY['owner', 'v']::name[]);
	SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
	SELECT synchro.activate_registry();`

// Item 3: logical messages anyone can emit never stop the stream. Before the fix the
// first one (a non-transactional synchro.fence) quarantined the stream as
// message_format.
func TestBoundaryStrangerMessagesNeverBlock(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		e := newAppEnv(t, appItemsDDL, appItemsRegistry, nil)
		rel := e.relationID(t, "items")
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
		waitEffects(t, e.db, 1)

		// Non-transactional, malformed, unknown prefix.
		e.appExec(t, `SELECT pg_logical_emit_message(false, 'synchro.fence', '{}')`)
		e.appExec(t, `SELECT pg_logical_emit_message(false, 'synchro.registry', 'not json')`)
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.fence', '{}')`)
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.fence', 'not json at all')`)
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.unknown', 'x')`)
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.', '')`)
		// Binary content (not UTF-8, a NUL byte), alone in its transaction and next to a
		// write: wal2json copies such bytes into its JSON verbatim.
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.fence', '\xff41fe00424344'::bytea)`)
		e.appExec(t, `BEGIN; SELECT pg_logical_emit_message(true, 'synchro.registry', '\xc3'::bytea);
			INSERT INTO app.items (id, owner) VALUES (16, 'a'); COMMIT`)
		// Well-formed forgeries without a valid MAC: a registry activation, a fence for a
		// row the transaction does not write, and a fence for the row it does write (it
		// would pair first: lower ordinal).
		forged := func(op, key string, oldKey any, ordinal int64) string {
			return fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence', json_build_object(
				'v', 2, 'kind', 'synced', 'relation_id', %d, 'schema', 'app', 'table', 'items', 'op', '%s',
				'old_key', %s, 'new_key', '%s', 'version', 'forged', 'fence_id', gen_random_uuid(), 'ordinal', %d,
				'table_id', 'items', 'pk', %s, 'mac', repeat('0', 32))::text)`, rel, op, oldKey, key, ordinal, key)
		}
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.registry',
			'{"v":2,"generation":99,"previous":1,"mac":"00000000000000000000000000000000"}')`)
		e.appExec(t, `BEGIN; `+forged("insert", "11", "NULL", 1)+`; COMMIT`)
		e.appExec(t, `BEGIN; `+forged("insert", "12", "NULL", 1)+`; INSERT INTO app.items (id, owner) VALUES (12, 'a'); COMMIT`)
		// Well-formed for encoding/json but not for jsonb (the staging column): a \u0000
		// escape and an unpaired surrogate.
		for _, esc := range []string{`\u0000`, `\ud800`} {
			e.appExec(t, fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence', '{"v":2,"kind":"synced",'
				'"relation_id":%d,"schema":"app%s","table":"items","op":"insert","old_key":null,"new_key":"14",'
				'"version":"x","fence_id":"6f1e2c3d-4b5a-4789-9abc-def012345678","ordinal":1,"table_id":"items",'
				'"pk":14,"mac":"00000000000000000000000000000000"}')`, rel, esc))
		}
		// A v1 fence (the old, unauthenticated shape).
		e.appExec(t, fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence', json_build_object(
			'v', 1, 'kind', 'synced', 'relation_id', %d, 'schema', 'app', 'table', 'items', 'op', 'update',
			'old_key', '1', 'new_key', '1', 'version', 'x', 'fence_id', gen_random_uuid(), 'ordinal', 1,
			'table_id', 'items', 'pk', 1)::text)`, rel))

		// Wire format 3 (issue 7): a well-formed fence with a MAC that is not the server
		// key's, for the row its transaction writes (it would pair first), and a
		// malformed one.
		forged3 := fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'synchro.fence',
			format('1:31:s%d:%d3:app5:items1:i2:156:forged36:%%s1:15:items1:n%%s', gen_random_uuid(), repeat('0', 32)))`,
			len(fmt.Sprint(rel)), rel)
		e.appExec(t, `BEGIN; `+forged3+`; INSERT INTO app.items (id, owner) VALUES (15, 'a'); COMMIT`)
		e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.fence', '1:31:s1:1' || repeat('0', 32))`)

		e.requireHealthy(t, `INSERT INTO app.items (id, owner) VALUES (13, 'a')`, "13")
		require.Equal(t, 1, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '12'`),
			"the genuine write next to a forged fence materializes")
		require.Equal(t, 1, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '15'`),
			"the genuine write next to a forged format-3 fence materializes")
		require.Zero(t, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '11'`))

		want := map[string]float64{"non_transactional": 2, "unknown_prefix": 2, "malformed": 8, "unauthenticated": 4}
		for reason, n := range want {
			// wal2json: the forged activation of generation 99 ends one session
			// (table_set_changed, docs/decoders.md), and the next reads again.
			e.requireIgnored(t, reason, n, decoderOf(t) == "wal2json")
		}
	})
}

// Item 3: a genuine fence that does not match its row event still blocks (the ADR's
// bypass rule): the trigger is disabled, so the row event has no fence.
func TestBoundaryGenuineMismatchStillPoisons(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		e := newAppEnv(t, appItemsDDL, appItemsRegistry, nil)
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
		waitEffects(t, e.db, 1)
		mustExec(t, e.db, `BEGIN; SET LOCAL session_replication_role = replica;
			INSERT INTO app.items (id, owner) VALUES (2, 'a'); COMMIT`)
		eventually(t, 10*time.Second, "a quarantine record", func() bool { return len(quarantines(t, e.db)) > 0 })
		require.Equal(t, "fence_mismatch", quarantines(t, e.db)[0].Class)
	})
}

// Item 4a: an unregistered json column holding valid json that jsonb refuses
// (\u0000) became poison materialize_22p05; also for a relation registered and
// written in the same source transaction as its activation.
func TestBoundaryUnregisteredValueNeverPoisons(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		e := newAppEnv(t, appItemsDDL+`; CREATE TABLE app.more (id int8 PRIMARY KEY, owner text, j json, note text)`,
			appItemsRegistry, nil)
		const bad = `{"a":"\u0000","s":"SENTINEL-4a0c9e"}`
		e.appExec(t, `INSERT INTO app.items (id, owner, extra) VALUES (1, 'a', $1)`, bad)
		e.appExec(t, `UPDATE app.items SET v = 2, extra = $1 WHERE id = 1`, bad)
		// Registration, activation and writes in one source transaction.
		mustExec(t, e.db, `BEGIN;
			SELECT synchro.register_table('app.more', 'more', ARRAY['owner', 'note']::name[]);
			SELECT synchro.add_scope_rule('more', 'm:', 'owner');
			SELECT synchro.activate_registry();
			INSERT INTO app.more (id, owner, j, note) VALUES (1, 'a', '{"a":"\u0000"}', 'n');
			COMMIT`)
		e.requireHealthy(t, `INSERT INTO app.more (id, owner, j) VALUES (2, 'a', '{"a":"\u0000"}')`, "2")
		var image string
		require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT image::text FROM synchro.projection
			WHERE relation_id = $1 AND pk = '1'`, e.relationID(t, "items")).Scan(&image))
		require.JSONEq(t, `{"id": 1, "owner": "a", "v": 2}`, image)
		require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT image::text FROM synchro.projection
			WHERE relation_id = $1 AND pk = '1'`, e.relationID(t, "more")).Scan(&image))
		require.JSONEq(t, `{"id": 1, "owner": "a", "note": "n"}`, image)
		e.requireNoSentinel(t, "SENTINEL-4a0c9e")
	})
}

// Item 4b: a registered value the row image cannot hold, or a registered key over the
// documented size, is refused at the source with a class-22 SQLSTATE, nothing
// written, and the value appears nowhere.
func TestBoundaryUnrenderableValueRefusedAtSource(t *testing.T) {
	t.Parallel()
	e := newAppEnv(t, `
		CREATE DOMAIN app.j1 AS json;
		CREATE DOMAIN app.j2 AS app.j1;
		CREATE TABLE app.docs (id int8 PRIMARY KEY, owner text, body json, big text, deep app.j2[]);
		CREATE TABLE app.notes (id text PRIMARY KEY, owner text)`, `
		SELECT synchro.register_table('app.docs', 'docs');
		SELECT synchro.register_table('app.notes', 'notes');
		SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
		SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.activate_registry();`, nil)
	const sentinel = "SENTINEL-7d1f0c"
	e.appExec(t, `INSERT INTO app.docs (id, owner, body) VALUES (1, 'a', '{"ok": true}')`)

	var errs []*pgconn.PgError
	requireClass22 := func(pe *pgconn.PgError) {
		t.Helper()
		require.True(t, strings.HasPrefix(pe.Code, "22"), "SQLSTATE %s (%s) is not class 22", pe.Code, pe.Message)
		errs = append(errs, pe)
	}
	// json that jsonb refuses, on insert and on update.
	requireClass22(e.appFails(t, `INSERT INTO app.docs (id, owner, body) VALUES (2, 'a', $1)`,
		`{"a":"\u0000","s":"`+sentinel+`"}`))
	requireClass22(e.appFails(t, `UPDATE app.docs SET body = $1 WHERE id = 1`, `{"s":"`+sentinel+`","a":"\u0000"}`))
	// The same inside an array of a domain over a domain over json.
	requireClass22(e.appFails(t, `UPDATE app.docs SET deep = ARRAY[$1]::app.j2[] WHERE id = 1`, `{"s":"`+sentinel+`","a":"\u0000"}`))
	// A registered value over the documented size (32 MiB of registered values).
	requireClass22(e.appFails(t, `INSERT INTO app.docs (id, owner, big) VALUES (3, 'a', $1 || repeat('x', 33 * 1024 * 1024))`, sentinel))
	// A registered key over the documented size (1024 bytes), incompressible.
	longKey := `(SELECT string_agg(md5(i::text || $1), '') FROM generate_series(1, 60) i)`
	requireClass22(e.appFails(t, `INSERT INTO app.notes (id, owner) VALUES (`+longKey+` || $1, 'a')`, sentinel))
	for _, pe := range errs {
		require.Contains(t, pe.Message, "registered", "the message names the rule: %s", pe.Message)
	}

	// Through push, the refusal is that mutation's rejected outcome (a json value jsonb
	// refuses cannot travel in push's jsonb; the key and the size can).
	var raw string
	big := strings.Repeat("k", 1100) + sentinel
	require.NoError(t, e.app.QueryRow(context.Background(), `SELECT synchro.push('c1', $1::jsonb)::text`,
		pushJSON(t, pushIns(pushID(), "notes", big, pm{"owner": "a"}), pushIns(pushID(), "notes", "ok", pm{"owner": "a"}))).Scan(&raw))
	out := pushParse(t, raw)
	require.Len(t, out, 2)
	pushRejected(t, out[0], out[0].str(t, "id"), "22001")
	require.Equal(t, "accepted", out[1].str(t, "status"))
	require.NotContains(t, raw, sentinel)

	require.Zero(t, countOf(t, e.db, `SELECT count(*) FROM app.docs WHERE id <> 1`))
	require.Equal(t, 1, countOf(t, e.db, `SELECT count(*) FROM app.notes`), "only the pushed 'ok'")
	var body string
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT body::text FROM app.docs WHERE id = 1`).Scan(&body))
	require.JSONEq(t, `{"ok": true}`, body)
	e.requireHealthy(t, `INSERT INTO app.docs (id, owner) VALUES (9, 'a')`, "9")
	e.requireNoSentinel(t, sentinel, errs...)
}

// Item 4c: scope and rule values of any length (btree keys overflowed at ~2.7 kB:
// 54000, poison).
func TestBoundaryLongScopeValues(t *testing.T) {
	t.Parallel()
	e := newAppEnv(t, `
		CREATE TABLE app.items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0);
		CREATE TABLE app.members (id int8 PRIMARY KEY, team text, user_id text);
		CREATE TABLE app.tasks (id int8 PRIMARY KEY, team text)`, `
		SELECT synchro.register_table('app.items', 'items');
		SELECT synchro.register_dependency('app.members');
		SELECT synchro.register_table('app.tasks', 'tasks');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.add_scope_rule('tasks', 'user:', 'team', 'app.members', 'team', 'user_id');
		SELECT synchro.activate_registry();`, nil)
	ctx := context.Background()
	// 8,000 hex characters: incompressible for the btree's inline compression.
	var long string
	require.NoError(t, e.db.Pool.QueryRow(ctx,
		`SELECT string_agg(md5(i::text || random()::text), '') FROM generate_series(1, 250) i`).Scan(&long))
	e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, $1), (2, $1 || 'x')`, long)
	e.appExec(t, `INSERT INTO app.members (id, team, user_id) VALUES (1, $1, $2)`, long, long+"-user")
	e.appExec(t, `INSERT INTO app.tasks (id, team) VALUES (1, $1)`, long)
	e.requireHealthy(t, `INSERT INTO app.items (id, owner) VALUES (3, 'short')`, "3")

	// The long scope is materialized (pull and rebuild take scopes of at most 512
	// characters, docs/sql/pull.md, so it is checked in the tables).
	require.Equal(t, 2, countOf(t, e.db, `SELECT count(*) FROM synchro.membership WHERE scope = 'owner:' || $1 OR scope = 'owner:' || $1 || 'x'`, long))
	require.Equal(t, 1, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE scope = 'owner:' || $1`, long))
	require.Equal(t, 2, countOf(t, e.db, `SELECT count(*) FROM synchro.rule_value WHERE value = $1`, long),
		"tasks.team and members.team (items.owner has a direct rule: not indexed)")

	// A rule value of any length through a dependency: tasks reach "user:<user_id>"
	// through members.team, an 8,000-character value on both sides.
	short := "u-" + randomToken(t)
	e.appExec(t, `INSERT INTO app.members (id, team, user_id) VALUES (2, $1, $2)`, long, short)
	e.requireHealthy(t, `INSERT INTO app.items (id, owner) VALUES (4, 'short')`, "4")
	rows, last := fullRebuild(t, e.db, "c1", "user:"+short, 1)
	require.Len(t, rows, 1)
	require.Equal(t, "tasks/1", rows[0].key())
	e.appExec(t, `UPDATE app.tasks SET team = team WHERE id = 1`)
	e.appExec(t, `INSERT INTO app.tasks (id, team) VALUES (2, $1)`, long)
	e.requireHealthy(t, `INSERT INTO app.items (id, owner) VALUES (5, 'short')`, "5")
	changes, _ := pullAll(t, e.db, "c1", "user:"+short, last.Cursor, 10)
	require.Equal(t, []string{"upsert:tasks/1", "upsert:tasks/2"}, opsOf(changes))
}

// gauge reads a gauge of the runner's metrics (0 when absent).
func (r *runningRunner) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// Item 6: the runner's buffer between replication and materialization and its COPY
// batches are bounded by bytes, not only by counts (4,096 payloads, BatchRows):
// 1 MB rows stay within the buffer bound, 10 MB rows and a 40 MB message pass one at
// a time, and a COPY batch never holds more than its byte bound or one row.
func TestBoundaryRunnerBoundedByBytes(t *testing.T) {
	t.Parallel()
	const bufferBytes, batchBytes = 4 << 20, 2 << 20
	e := newAppEnv(t, `CREATE TABLE app.blobs (id int8 PRIMARY KEY, owner text, body text)`, `
		SELECT synchro.register_table('app.blobs', 'blobs');
		SELECT synchro.add_scope_rule('blobs', 'owner:', 'owner');
		SELECT synchro.activate_registry();`, func(c *runner.Config) {
		c.BufferBytes = bufferBytes
		c.BatchBytes = batchBytes
	})
	ctx := context.Background()
	const mb = 1 << 20

	// Phase 1: 40 rows of 1 MB in one source transaction.
	e.appExec(t, `INSERT INTO app.blobs SELECT g, 'a', repeat(chr(64 + g % 26), 1024 * 1024) FROM generate_series(1, 40) g`)
	e.requireHealthy(t, `INSERT INTO app.blobs (id, owner) VALUES (100, 'a')`, "100")
	peak := e.rr.gauge(t, "synchro_runner_buffer_peak_bytes")
	require.Greater(t, peak, float64(mb), "the buffer held at least one 1 MB row")
	require.LessOrEqual(t, peak, float64(bufferBytes), "the buffer stays within its byte bound")
	batchPeak := e.rr.gauge(t, "synchro_runner_batch_peak_bytes")
	require.Greater(t, batchPeak, float64(mb))
	require.LessOrEqual(t, batchPeak, float64(batchBytes+2*mb), "a batch stops at its byte bound (plus the row that crossed it)")

	// Phase 2: 10 MB rows (three in one transaction) and a 40 MB message, each larger
	// than the bounds: they pass alone.
	e.appExec(t, `INSERT INTO app.blobs SELECT 200 + g, 'b', repeat(chr(64 + g), 10 * 1024 * 1024) FROM generate_series(1, 3) g`)
	e.appExec(t, `INSERT INTO app.blobs VALUES (204, 'b', repeat('z', 10 * 1024 * 1024))`)
	e.appExec(t, `SELECT pg_logical_emit_message(true, 'app.huge', repeat('m', 40 * 1024 * 1024))`)
	e.appExec(t, `SELECT pg_logical_emit_message(true, 'synchro.fence', repeat('m', 40 * 1024 * 1024))`)
	e.requireHealthy(t, `INSERT INTO app.blobs (id, owner) VALUES (101, 'b')`, "101")
	var n int
	require.NoError(t, e.db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.projection
		WHERE relation_id = $1 AND octet_length(image ->> 'body') = 10 * 1024 * 1024`, e.relationID(t, "blobs")).Scan(&n))
	require.Equal(t, 4, n)
	require.LessOrEqual(t, e.rr.gauge(t, "synchro_runner_batch_peak_bytes"), float64(11*mb), "one 10 MB row per batch")
	e.requireIgnored(t, "malformed", 1, false)
}

// Item 3 (issue 7 moved the verifier into the runner): runner/msgauth keeps exactly
// the messages whose MAC under the server key matches their fields, and computes
// the MAC synchro._message_mac does (the fence triggers' and activate_registry's);
// changing any field, the prefix or the MAC drops a message.
func TestBoundaryMessageAuthentication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	var inner, outer []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT inner_pad, outer_pad FROM synchro.runner_message_key()`).Scan(&inner, &outer))
	key, err := msgauth.NewKey(inner, outer)
	require.NoError(t, err)

	sign := func(prefix string, m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		var mac string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro._message_mac($1, synchro._message_body($1, $2::jsonb))`,
			prefix, m).Scan(&mac))
		out["mac"] = mac
		return out
	}
	// verify parses a message as the collator does and authenticates it as the
	// applier does; a message that does not parse is dropped before that.
	verify := func(prefix string, content map[string]any) bool {
		raw, err := json.Marshal(content)
		require.NoError(t, err)
		switch prefix {
		case decode.PrefixFence:
			f, err := decode.ParseFence(raw)
			return err == nil && key.VerifyFence(&f)
		case decode.PrefixRegistry:
			a, err := decode.ParseRegistryActivation(raw)
			return err == nil && key.VerifyActivation(&a)
		}
		return false
	}

	fence := map[string]any{
		"v": 2, "kind": "synced", "relation_id": 3, "schema": "public", "table": "tasks", "op": "update",
		"old_key": "4:2|", "new_key": "4:2|", "version": "9b3c", "fence_id": "6f1e2c3d-4b5a-4789-9abc-def012345678",
		"ordinal": 1017, "table_id": "tasks", "pk": "4:2|",
	}
	// Keys and names outside ASCII, escapes and an integer key: the body counts
	// characters, not bytes, and renders what ->> renders.
	wide := map[string]any{
		"v": 2, "kind": "synced", "relation_id": 12, "schema": "scheme \"ü\"", "table": "täsks\n", "op": "insert",
		"old_key": nil, "new_key": "42", "version": "v-€", "fence_id": "00000000-0000-4000-8000-00000000002a",
		"ordinal": 0, "table_id": "tä\tsks", "pk": 42,
	}
	dependency := map[string]any{
		"v": 2, "kind": "capture_dependency", "relation_id": 5, "schema": "app", "table": "members", "op": "delete",
		"old_key": "7", "new_key": nil, "version": "x", "fence_id": "6f1e2c3d-4b5a-4789-9abc-def012345679",
		"ordinal": 3, "capture_key": "7|日本",
	}
	registry := map[string]any{"v": 2, "generation": 2, "previous": nil}
	next := map[string]any{"v": 2, "generation": 3, "previous": 2}

	type msg struct {
		name    string
		prefix  string
		content map[string]any
		keep    bool
	}
	msgs := []msg{
		{"genuine fence", decode.PrefixFence, sign(decode.PrefixFence, fence), true},
		{"genuine fence, wide characters", decode.PrefixFence, sign(decode.PrefixFence, wide), true},
		{"genuine dependency fence", decode.PrefixFence, sign(decode.PrefixFence, dependency), true},
		{"genuine first activation", decode.PrefixRegistry, sign(decode.PrefixRegistry, registry), true},
		{"genuine activation", decode.PrefixRegistry, sign(decode.PrefixRegistry, next), true},
		{"activation mac on a fence prefix", decode.PrefixFence, sign(decode.PrefixRegistry, registry), false},
		{"fence mac on a registry prefix", decode.PrefixRegistry, sign(decode.PrefixFence, fence), false},
		{"no mac", decode.PrefixFence, fence, false},
	}
	for k := range fence {
		tampered := sign(decode.PrefixFence, fence)
		switch v := tampered[k].(type) {
		case string:
			tampered[k] = v + "x"
		case int:
			tampered[k] = v + 1
		}
		msgs = append(msgs, msg{"changed " + k, decode.PrefixFence, tampered, false})
	}
	macChanged := sign(decode.PrefixFence, fence)
	macChanged["mac"] = strings.Replace(macChanged["mac"].(string), macChanged["mac"].(string)[:1], "f", 1)
	if macChanged["mac"] == sign(decode.PrefixFence, fence)["mac"] {
		macChanged["mac"] = "0" + macChanged["mac"].(string)[1:]
	}
	msgs = append(msgs, msg{"changed mac", decode.PrefixFence, macChanged, false})
	upper := sign(decode.PrefixFence, fence)
	upper["mac"] = strings.ToUpper(upper["mac"].(string))
	if upper["mac"] != sign(decode.PrefixFence, fence)["mac"] {
		msgs = append(msgs, msg{"mac in upper case", decode.PrefixFence, upper, false})
	}
	// Moving a length prefix: "4:2|" split differently across old_key and new_key.
	shifted := sign(decode.PrefixFence, fence)
	shifted["op"], shifted["old_key"], shifted["new_key"] = "update", "4:2|4", ":2|"
	msgs = append(msgs, msg{"shifted fields", decode.PrefixFence, shifted, false})
	for _, m := range msgs {
		require.Equal(t, m.keep, verify(m.prefix, m.content), m.name)
	}

	// The Go MAC is the SQL one, field for field.
	for _, c := range []struct {
		prefix  string
		content map[string]any
	}{{decode.PrefixFence, fence}, {decode.PrefixFence, wide}, {decode.PrefixFence, dependency},
		{decode.PrefixRegistry, registry}, {decode.PrefixRegistry, next}} {
		signed := sign(c.prefix, c.content)
		raw, err := json.Marshal(signed)
		require.NoError(t, err)
		var body, mac string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro._message_body($1, $2::jsonb), $2::jsonb ->> 'mac'`,
			c.prefix, raw).Scan(&body, &mac))
		if c.prefix == decode.PrefixFence {
			f, err := decode.ParseFence(raw)
			require.NoError(t, err)
			require.Equal(t, body, msgauth.FenceBody(&f))
		} else {
			a, err := decode.ParseRegistryActivation(raw)
			require.NoError(t, err)
			require.Equal(t, body, msgauth.ActivationBody(&a))
		}
		require.Equal(t, mac, key.MAC(c.prefix, body))
	}

	// Only the runner reads the key.
	app := newHostileApp(t, db, false)
	_, err = app.conn.Exec(ctx, `SELECT * FROM synchro.runner_message_key()`)
	requireSQLState(t, err, "42501")
}

// A bulk write to a table the pack does not capture: the walsender replays the whole
// transaction at its commit and sends nothing of it, and while it does it answers only
// every wal_sender_timeout / 2 (30 s by default). The runner took that silence for a
// dead connection after its receive timeout, the walsender it left kept the slot busy
// ("replication slot is still active") until it finished, and the next session replayed
// the same transaction from the start: capture never passed it, under both decoders,
// with no quarantine (found by review 2026-12-05, with 4,000,000 rows and the tests'
// 5 s receive timeout). The reader now asks the server, on a connection of its own,
// whether its walsender is decoding before it gives the session up.
func TestRunnerSilentReplayOfUnregisteredBulkWrite(t *testing.T) {
	t.Parallel()
	e := newAppEnv(t, appItemsDDL+`; CREATE TABLE app.bulk (id int8, v int8)`, appItemsRegistry, func(c *runner.Config) {
		c.StandbyInterval = 500 * time.Millisecond
		c.ReceiveTimeout = time.Second
	})
	e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
	waitEffects(t, e.db, 1)

	e.appExec(t, `INSERT INTO app.bulk SELECT g, g FROM generate_series(1, 1000000) g`)
	e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (2, 'a')`)
	materialized := pollFor(120*time.Second, func() bool {
		return countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '2'`) > 0
	})
	logs := e.logs.String()
	dead := strings.Count(logs, "delivered nothing within the receive timeout")
	require.True(t, materialized, "capture stalled behind a bulk write to an unregistered table (%d sessions, %d ended as dead connections)",
		strings.Count(logs, "replication started"), dead)
	require.Zero(t, dead, "sessions ended as dead connections while the walsender decoded")
	require.Equal(t, 1, strings.Count(logs, "replication started"), "one session throughout")
	requireNoQuarantine(t, e.db)
}

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Hostile input (issue 9 item 4): every public SQL function called with NULLs, wrong
// JSON types, huge payloads, too many mutations, unicode and control characters in
// keys, SQL-injection-shaped identifiers and scopes, deeply nested JSON and limits out
// of range answers the contract's error (CONTRACT.md "Error codes", docs/errors.md)
// and writes nothing: the row count of every table of schemas synchro and public, the
// last value of every sequence of the pack, the triggers and the publication's
// relations are the same before and after each call.
//
// Each call runs as the role the contract gives: push, pull, rebuild, readiness and
// ready as a login in synchro_app, the registry, poison and retention functions as a
// login in synchro_operator (SET ROLE on a dedicated session). The cases of one group
// share one database and run one after another: a case that writes is caught by its
// own before/after comparison.

// hostileMarker is the text of every huge hostile value: an error must never echo it.
const hostileMarker = "zq-hostile-zq"

// huge is about n bytes of hostileMarker.
func huge(n int) string { return strings.Repeat(hostileMarker, n/len(hostileMarker)+1) }

// tenMB is 10 MB of hostile text.
var tenMB = huge(10 << 20)

// injection is an SQL-injection-shaped identifier or scope.
const injection = `x'); DROP TABLE public.items; SELECT ('"x`

// nested is a JSON value nested depth levels deep (arrays, or objects when obj).
func nested(depth int, obj bool) string {
	if obj {
		return strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
	}
	return strings.Repeat("[", depth) + "1" + strings.Repeat("]", depth)
}

// packSnapshot is what "writes nothing" compares: the row count of every table of
// schemas synchro and public, the last value of every sequence of schema synchro, the
// user triggers and the publication's relations.
func packSnapshot(t *testing.T, db *testdb.DB) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `
		SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname IN ('synchro', 'public') AND c.relkind IN ('r', 'p') ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]string{}
	for _, table := range tables {
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		out["rows "+table] = fmt.Sprint(n)
	}
	rows, err = db.Pool.Query(ctx, `
		SELECT format('%I.%I', schemaname, sequencename), coalesce(last_value::text, 'unused')
		  FROM pg_sequences WHERE schemaname = 'synchro' ORDER BY 1`)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var s [2]string
		return s, r.Scan(&s[0], &s[1])
	})
	require.NoError(t, err)
	require.NotEmpty(t, seqs, "the pack has sequences")
	for _, s := range seqs {
		out["sequence "+s[0]] = s[1]
	}
	var trig, pub, slots int64
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),
		       (SELECT count(*) FROM pg_publication_rel),
		       (SELECT count(*) FROM pg_replication_slots WHERE database = current_database())`).Scan(&trig, &pub, &slots))
	out["triggers"] = fmt.Sprint(trig)
	out["publication relations"] = fmt.Sprint(pub)
	out["slots"] = fmt.Sprint(slots)
	return out
}

// hostileRoles are an application login (in synchro_app) and an operator login (in
// synchro_operator, with SELECT on schema public's tables), each on its own session.
type hostileRoles struct {
	app, operator *pgx.Conn
}

func newHostileRoles(t *testing.T, db *testdb.DB) hostileRoles {
	t.Helper()
	ctx := context.Background()
	suffix := randomSuffix()
	app := pgx.Identifier{"hostile_app_" + suffix}.Sanitize()
	op := pgx.Identifier{"hostile_op_" + suffix}.Sanitize()
	mustExec(t, db, `CREATE ROLE `+app+` LOGIN IN ROLE synchro_app`)
	mustExec(t, db, `CREATE ROLE `+op+` LOGIN IN ROLE synchro_operator`)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, r := range []string{app, op} {
			_, _ = db.Pool.Exec(ctx, `DROP OWNED BY `+r+` CASCADE`)
			_, _ = db.Pool.Exec(ctx, `DROP ROLE `+r)
		}
	})
	mustExec(t, db, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO `+op)
	session := func(role string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, `SET ROLE `+role)
		require.NoError(t, err)
		return conn
	}
	return hostileRoles{app: session(app), operator: session(op)}
}

// hostileCase is one call. code "" means the call must succeed (and still write
// nothing).
type hostileCase struct {
	name     string
	operator bool // as the operator login; else as the application login
	sql      string
	args     []any
	code     string
}

// runHostile runs the cases one after another on db, each as a subtest named for the
// case.
func runHostile(t *testing.T, db *testdb.DB, cases []hostileCase) {
	t.Helper()
	roles := newHostileRoles(t, db)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn := roles.app
			if tc.operator {
				conn = roles.operator
			}
			before := packSnapshot(t, db)
			rows, err := conn.Query(ctx, tc.sql, tc.args...)
			if err == nil {
				for rows.Next() {
				}
				rows.Close()
				err = rows.Err()
			}
			if tc.code == "" {
				require.NoError(t, err)
			} else {
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", tc.code, err)
				require.Equal(t, tc.code, pgErr.Code, "message: %.300s", pgErr.Message)
				text := pgErr.Message + "\n" + pgErr.Detail + "\n" + pgErr.Hint
				require.LessOrEqual(t, len(text), 400, "an error message is bounded: %.400s", text)
				require.NotContains(t, text, hostileMarker, "an error never echoes the input")
			}
			require.Equal(t, before, packSnapshot(t, db), "a refused call writes nothing")
		})
	}
}

func TestHostilePush(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`INSERT INTO public.tags (name, n) VALUES ('seed', 1)`)
	ok := func() pm { return pushIns(pushID(), "tags", "new", pm{"n": 1}) }
	js := func(ms ...any) string { return pushJSON(t, ms...) }
	many := make([]any, 1001)
	for i := range many {
		many[i] = pushIns(pushID(), "tags", fmt.Sprintf("t%d", i), nil)
	}
	const push = `SELECT synchro.push($1::text, $2::jsonb)`
	c := func(name string, client any, mutations any) hostileCase {
		return hostileCase{name: name, sql: push, args: []any{client, mutations}, code: "SY400"}
	}
	cases := []hostileCase{
		c("NullClientID", nil, js(ok())),
		c("EmptyClientID", "", js(ok())),
		c("ClientIDTooLong", strings.Repeat("c", 257), js(ok())),
		c("ClientID10MB", tenMB, js(ok())),
		c("NullMutations", "c1", nil),
		c("JSONNull", "c1", `null`),
		c("JSONString", "c1", `"`+hostileMarker+`"`),
		c("JSONNumber", "c1", `12345`),
		c("JSONBoolean", "c1", `true`),
		c("JSONObject", "c1", `{"id": "`+hostileMarker+`"}`),
		c("EmptyArray", "c1", `[]`),
		c("ArrayOfNulls", "c1", `[null]`),
		c("ArrayOfArrays", "c1", `[[]]`),
		c("ThousandAndOneMutations", "c1", js(many...)),
		c("TenMBUnknownField", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x", "zz": tenMB})),
		c("TenMBID", "c1", js(ok(), pm{"id": tenMB, "table": "tags", "op": "insert", "pk": "x"})),
		c("TenMBTable", "c1", js(ok(), pushIns(pushID(), tenMB, "x", nil))),
		c("TenMBOp", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": tenMB, "pk": "x"})),
		c("TenMBColumnName", "c1", js(ok(), pushIns(pushID(), "tags", "x", pm{tenMB: 1}))),
		c("TenMBIntKeyAsString", "c1", js(ok(), pushIns(pushID(), "items", tenMB, pm{"name": "n"}))),
		c("TenMBUUIDKey", "c1", js(ok(), pushIns(pushID(), "docs", tenMB, nil))),
		c("DeeplyNestedMutations", "c1", nested(5000, false)),
		c("DeeplyNestedMutation", "c1", `[`+nested(5000, true)+`]`),
		c("DeeplyNestedID", "c1", js(ok(), pm{"id": json.RawMessage(nested(5000, true)), "table": "tags", "op": "insert", "pk": "x"})),
		c("DeeplyNestedPK", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": json.RawMessage(nested(5000, false))})),
		c("DeeplyNestedRow", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x", "row": json.RawMessage(nested(5000, false))})),
		c("DeeplyNestedBaseVersion", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "seed",
			"base_version": json.RawMessage(nested(5000, true))})),
		c("WrongTypeID", "c1", js(ok(), pm{"id": true, "table": "tags", "op": "insert", "pk": "x"})),
		c("WrongTypeTable", "c1", js(ok(), pm{"id": pushID(), "table": 7, "op": "insert", "pk": "x"})),
		c("WrongTypeOp", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": []string{"insert"}, "pk": "x"})),
		c("NullPK", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": nil})),
		c("ObjectPK", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": pm{"name": "x"}})),
		c("BooleanIntPK", "c1", js(ok(), pushIns(pushID(), "items", true, pm{"name": "n"}))),
		c("EnormousIntPK", "c1", js(ok(), pushIns(pushID(), "items", json.RawMessage("1e400"), pm{"name": "n"}))),
		c("EnormousNegativeIntPK", "c1", js(ok(), pushIns(pushID(), "children", json.RawMessage("-1e400"), nil))),
		c("FractionalInt8PK", "c1", js(ok(), pushIns(pushID(), "children", json.RawMessage("1.0000000000000000001"), nil))),
		c("TinyFractionPK", "c1", js(ok(), pushIns(pushID(), "children", json.RawMessage("1e-400"), nil))),
		c("NullRow", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x", "row": json.RawMessage("[null]")})),
		c("StringRow", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x", "row": hostileMarker})),
		c("NumberBaseVersion", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "seed", "base_version": 1})),
		c("NullBaseVersion", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "seed", "base_version": nil})),
		c("UnicodeFieldName", "c1", js(ok(), pm{"id": pushID(), "tablé": "tags", "op": "insert", "pk": "x"})),
		c("ControlCharFieldName", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x", "row\u0001": pm{}})),
		c("UnicodeColumnName", "c1", js(ok(), pushIns(pushID(), "tags", "x", pm{"ñ": 1}))),
		c("ControlCharColumnName", "c1", js(ok(), pushIns(pushID(), "tags", "x", pm{"n\u001b[2J": 1}))),
		c("ZeroWidthColumnName", "c1", js(ok(), pushIns(pushID(), "tags", "x", pm{"n\u200b": 1}))),
		c("UnicodeTableID", "c1", js(ok(), pushIns(pushID(), "tägs", "x", nil))),
		c("ControlCharTableID", "c1", js(ok(), pushIns(pushID(), "tags\u0007", "x", nil))),
		c("UnicodeOp", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "ınsert", "pk": "x"})),
		c("FullwidthDigitsInID", "c1", js(ok(), pm{"id": "１" + pushID()[1:], "table": "tags", "op": "insert", "pk": "x"})),
		c("InjectionTableID", "c1", js(ok(), pushIns(pushID(), injection, "x", nil))),
		c("InjectionQuotedTableID", "c1", js(ok(), pushIns(pushID(), `public"."tags`, "x", nil))),
		c("InjectionColumnName", "c1", js(ok(), pushIns(pushID(), "tags", "x", pm{`n") VALUES (1); DROP TABLE public.tags; --`: 1}))),
		c("InjectionOp", "c1", js(ok(), pm{"id": pushID(), "table": "tags", "op": "insert' OR '1'='1", "pk": "x"})),
		c("InjectionUUIDKey", "c1", js(ok(), pushIns(pushID(), "docs", "00000000-0000-0000-0000-000000000000'::uuid OR true --", nil))),
		c("SchemaTableAsTableID", "c1", js(ok(), pushIns(pushID(), "synchro.mutation_outcome", "x", nil))),
	}
	runHostile(t, e.db, cases)
}

// readEnv is a database with items (owner scopes, rows 1 and 3 in owner:a, 2 in
// owner:b), a stream that materialized them, and genuine tokens; its runner is stopped
// again, so nothing but the call under test writes.
type readEnv struct {
	db                  *testdb.DB
	cursorA, cursorB    string // closing cursors of rebuilds of owner:a and owner:b
	sessionA, lastSessA string // a has_more rebuild session of owner:a, and a last page's
	sessionB            string
}

func newReadEnv(t *testing.T) *readEnv {
	t.Helper()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0, note text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO items (id, owner, v) VALUES (1, 'a', 1), (2, 'b', 2), (3, 'a', 3);`)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	write(t, db, `INSERT INTO items (id, owner) VALUES (4, 'a'), (5, 'a')`)
	env := &readEnv{db: db}
	first := mustRebuildPage(t, db, "reader", "owner:a", "", 1)
	require.True(t, first.HasMore)
	env.sessionA = first.Session
	_, last := fullRebuild(t, db, "reader", "owner:a", 1000)
	env.cursorA, env.lastSessA = last.Cursor, last.Session
	firstB := mustRebuildPage(t, db, "reader", "owner:b", "", 1)
	env.sessionB, env.cursorB = firstB.Session, firstB.Cursor
	require.NotEmpty(t, env.cursorB)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
	return env
}

func TestHostileReaders(t *testing.T) {
	t.Parallel()
	env := newReadEnv(t)
	const pull = `SELECT synchro.pull($1::text, $2::text, $3::text, $4::int)`
	const rebuild = `SELECT synchro.rebuild($1::text, $2::text, $3::text, $4::int)`
	a, b := env.cursorA, env.cursorB
	flip := func(tok string, i int) string {
		r := []byte(tok)
		if r[i] == 'A' {
			r[i] = 'B'
		} else {
			r[i] = 'A'
		}
		return string(r)
	}
	// Every case is SY400 for both functions (the contract checks SY400 first).
	type arg struct {
		name         string
		client       any
		scope        any
		token        any
		limit        any
		pullToken    any // when set, pull gets it instead of token
		rebuildToken any // when set, rebuild gets it instead of token
	}
	args := []arg{
		{name: "NullClientID", client: nil, scope: "owner:a", limit: 10},
		{name: "EmptyClientID", client: "", scope: "owner:a", limit: 10},
		{name: "ClientIDTooLong", client: strings.Repeat("c", 257), scope: "owner:a", limit: 10},
		{name: "ClientID10MB", client: tenMB, scope: "owner:a", limit: 10},
		{name: "NullScope", client: "r", scope: nil, limit: 10},
		{name: "EmptyScope", client: "r", scope: "", limit: 10},
		{name: "ScopeTooLong", client: "r", scope: "owner:" + strings.Repeat("a", 507), limit: 10},
		{name: "Scope10MB", client: "r", scope: tenMB, limit: 10},
		{name: "NullLimit", client: "r", scope: "owner:a", limit: nil},
		{name: "ZeroLimit", client: "r", scope: "owner:a", limit: 0},
		{name: "NegativeLimit", client: "r", scope: "owner:a", limit: -1},
		{name: "MinIntLimit", client: "r", scope: "owner:a", limit: math.MinInt32},
		{name: "LimitAboveMax", client: "r", scope: "owner:a", limit: 10001},
		{name: "MaxIntLimit", client: "r", scope: "owner:a", limit: math.MaxInt32},
		{name: "MaxIntLimitWithToken", client: "r", scope: "owner:a", limit: math.MaxInt32, pullToken: a, rebuildToken: env.sessionA},
		{name: "EmptyToken", client: "r", scope: "owner:a", token: "", limit: 10},
		{name: "GarbageToken", client: "r", scope: "owner:a", token: "not-a-token", limit: 10},
		{name: "Token10MB", client: "r", scope: "owner:a", token: tenMB, limit: 10},
		{name: "TokenOfBase64Garbage", client: "r", scope: "owner:a", token: strings.Repeat("QUJD", 30), limit: 10},
		{name: "TokenWithControlChars", client: "r", scope: "owner:a", pullToken: a[:20] + "\u0001\u001f\u007f" + a[23:],
			rebuildToken: env.sessionA[:20] + "\u0001\u001f\u007f" + env.sessionA[23:], limit: 10},
		{name: "TokenWithUnicode", client: "r", scope: "owner:a", pullToken: a[:20] + "é" + a[21:],
			rebuildToken: env.sessionA[:20] + "é" + env.sessionA[21:], limit: 10},
		{name: "TokenWithPadding", client: "r", scope: "owner:a", pullToken: a + "==", rebuildToken: env.sessionA + "==", limit: 10},
		{name: "TokenInjection", client: "r", scope: "owner:a", token: "x' OR '1'='1'; DROP TABLE public.items; --", limit: 10},
		{name: "TruncatedToken", client: "r", scope: "owner:a", pullToken: a[:len(a)-1], rebuildToken: env.sessionA[:len(env.sessionA)-1], limit: 10},
		{name: "FlippedToken", client: "r", scope: "owner:a", pullToken: flip(a, 5), rebuildToken: flip(env.sessionA, 5), limit: 10},
		{name: "FlippedMAC", client: "r", scope: "owner:a", pullToken: flip(a, len(a)-3), rebuildToken: flip(env.sessionA, len(env.sessionA)-3), limit: 10},
		{name: "TokenOfAnotherScope", client: "r", scope: "owner:a", pullToken: b, rebuildToken: env.sessionB, limit: 10},
		{name: "TokenForInjectionScope", client: "r", scope: "owner:a' OR scope LIKE '%", pullToken: a, rebuildToken: env.sessionA, limit: 10},
		{name: "TokenForControlCharScope", client: "r", scope: "owner:a\u0008", pullToken: a, rebuildToken: env.sessionA, limit: 10},
		{name: "TokenForUnicodeLookalikeScope", client: "r", scope: "оwner:a", pullToken: a, rebuildToken: env.sessionA, limit: 10},
		{name: "TokenOfTheOtherKind", client: "r", scope: "owner:a", pullToken: env.sessionA, rebuildToken: a, limit: 10},
		{name: "LastSessionAsCursor", client: "r", scope: "owner:a", pullToken: env.lastSessA, rebuildToken: env.cursorA, limit: 10},
	}
	var cases []hostileCase
	for _, x := range args {
		pt, rt := x.token, x.token
		if x.pullToken != nil {
			pt = x.pullToken
		}
		if x.rebuildToken != nil {
			rt = x.rebuildToken
		}
		cases = append(cases,
			hostileCase{name: "Pull" + x.name, sql: pull, args: []any{x.client, x.scope, pt, x.limit}, code: "SY400"},
			hostileCase{name: "Rebuild" + x.name, sql: rebuild, args: []any{x.client, x.scope, rt, x.limit}, code: "SY400"})
	}
	cases = append(cases,
		// The control calls: genuine tokens work, and reading writes nothing.
		hostileCase{name: "PullGenuineCursor", sql: pull, args: []any{"r", "owner:a", a, 10}},
		hostileCase{name: "RebuildGenuineSession", sql: rebuild, args: []any{"r", "owner:a", env.sessionA, 10}},
		hostileCase{name: "PullNoCursor", sql: pull, args: []any{"r", "owner:a", nil, 10}, code: "SY409"},
		hostileCase{name: "Readiness", sql: `SELECT * FROM synchro.readiness()`},
		hostileCase{name: "Ready", sql: `SELECT synchro.ready()`},
		// Retention (operator) on a stream with materialized transactions.
		hostileCase{name: "CompactNull", operator: true, sql: `SELECT synchro.compact($1::interval)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "CompactNegative", operator: true, sql: `SELECT synchro.compact('-1 microsecond')`, code: "SY400"},
		hostileCase{name: "CompactNegativeDays", operator: true, sql: `SELECT synchro.compact('1 day -25 hours')`, code: "SY400"},
		hostileCase{name: "CompactEnormousNegative", operator: true, sql: `SELECT synchro.compact('-178000000 years')`, code: "SY400"},
		hostileCase{name: "CompactEnormousKeep", operator: true, sql: `SELECT synchro.compact('178000000 years')`},
		hostileCase{name: "CompactEnormousKeepDays", operator: true, sql: `SELECT synchro.compact('2147483647 days')`},
		hostileCase{name: "CompactEnormousKeepMicroseconds", operator: true, sql: `SELECT synchro.compact('9223372036854775807 microseconds')`},
		hostileCase{name: "RetryPoisonWithoutPoison", operator: true, sql: `SELECT synchro.retry_poison()`, code: "SY400"},
		// Stream reset (operator): nothing begins, activates or aborts on bad input.
		hostileCase{name: "BeginResetNull", operator: true, sql: `SELECT synchro.begin_reset($1)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "BeginResetEmpty", operator: true, sql: `SELECT synchro.begin_reset('')`, code: "SY400"},
		hostileCase{name: "BeginResetHugeReason", operator: true, sql: `SELECT synchro.begin_reset(repeat('x', 10000000))`, code: "SY400"},
		hostileCase{name: "ResetStatusNull", operator: true, sql: `SELECT synchro.reset_status($1)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "ResetStatusUnknown", operator: true, sql: `SELECT synchro.reset_status(gen_random_uuid())`, code: "SY400"},
		hostileCase{name: "ActivateResetNull", operator: true, sql: `SELECT synchro.activate_reset($1)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "ActivateResetUnknown", operator: true, sql: `SELECT synchro.activate_reset(gen_random_uuid())`, code: "SY400"},
		hostileCase{name: "AbortResetNull", operator: true, sql: `SELECT synchro.abort_reset($1)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "AbortResetUnknown", operator: true, sql: `SELECT synchro.abort_reset(gen_random_uuid())`, code: "SY400"},
		hostileCase{name: "CompactAllNull", operator: true, sql: `CALL synchro.compact_all($1::interval)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "CompactAllNegative", operator: true, sql: `CALL synchro.compact_all('-1 microsecond')`, code: "SY400"},
		hostileCase{name: "CompactAllEnormousKeep", operator: true, sql: `CALL synchro.compact_all('178000000 years')`},
		hostileCase{name: "CompactAllAsApp", sql: `CALL synchro.compact_all('178000000 years')`, code: "42501"},
		// retire_client refuses before it records anything.
		hostileCase{name: "RetireClientNull", operator: true, sql: `SELECT synchro.retire_client($1::text)`, args: []any{nil}, code: "SY400"},
		hostileCase{name: "RetireClientEmpty", operator: true, sql: `SELECT synchro.retire_client('')`, code: "SY400"},
		hostileCase{name: "RetireClientTooLong", operator: true, sql: `SELECT synchro.retire_client($1::text)`, args: []any{strings.Repeat("c", 257)}, code: "SY400"},
		hostileCase{name: "RetireClient10MB", operator: true, sql: `SELECT synchro.retire_client($1::text)`, args: []any{tenMB}, code: "SY400"},
		hostileCase{name: "RetireClientAsApp", sql: `SELECT synchro.retire_client('r')`, code: "42501"},
	)
	runHostile(t, env.db, cases)
}

// registrySchema: tables a registry call may name. reg_ok (int8 key) is staged as a
// synced table and dep as a dependency in the pending generation (committed), so the
// column and via checks of add_scope_rule are reached.
const registrySchema = `
CREATE TABLE public.items (id int8 PRIMARY KEY, owner text);
CREATE TABLE public.reg_ok (id int8 PRIMARY KEY, owner text, body text);
CREATE TABLE public.reg_free (id int8 PRIMARY KEY, owner text);
CREATE TABLE public.dep (id int8 PRIMARY KEY, k int8, u text);
CREATE TABLE public.reg_comp (a int, b int, PRIMARY KEY (a, b));
CREATE TABLE public.reg_nopk (a int);
CREATE TABLE public.reg_tskey (id timestamptz PRIMARY KEY);
CREATE TABLE public.reg_full (id int PRIMARY KEY);
ALTER TABLE public.reg_full REPLICA IDENTITY FULL;
CREATE UNLOGGED TABLE public.reg_unlogged (id int PRIMARY KEY);
CREATE VIEW public.reg_view AS SELECT id FROM public.reg_ok;
CREATE TABLE public."x'); DROP TABLE public.items; SELECT ('" (a int, b int, PRIMARY KEY (a, b));
CREATE TABLE public."tåble ✓" (a int, b int, PRIMARY KEY (a, b));
CREATE TABLE public."ctl` + "\x01\x1b" + `" (a int, b int, PRIMARY KEY (a, b));
CREATE FUNCTION public.authz_invoker(c text, s text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public."x'); DROP TABLE public.items; --"(c text, s text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE FUNCTION public.authz_wrong_result(c text, s text) RETURNS text LANGUAGE sql AS 'SELECT ''t''';
CREATE PROCEDURE public.authz_proc(c text, s text) LANGUAGE sql AS 'SELECT 1';
SELECT synchro.register_table('public.reg_ok', 'reg_ok');
SELECT synchro.register_dependency('public.dep');
`

func TestHostileRegistry(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, registrySchema)
	op := func(name, sql string, args ...any) hostileCase {
		return hostileCase{name: name, operator: true, sql: sql, args: args, code: "SY400"}
	}
	const reg = `SELECT synchro.register_table($1::regclass, $2::text, $3::name[])`
	const dep = `SELECT synchro.register_dependency($1::regclass, $2::name[])`
	const rule = `SELECT synchro.add_scope_rule($1::text, $2::text, $3::name)`
	const via = `SELECT synchro.add_scope_rule($1::text, $2::text, $3::name, $4::regclass, $5::name, $6::name)`
	const authz = `SELECT synchro.set_scope_authorizer($1::regprocedure)`
	inj := `public."x'); DROP TABLE public.items; SELECT ('"`
	cases := []hostileCase{
		op("RegisterTableNullRelation", reg, nil, "t1", nil),
		op("RegisterTableNullTableID", reg, "public.reg_free", nil, nil),
		op("RegisterTableEmptyTableID", reg, "public.reg_free", "", nil),
		op("RegisterTableUppercaseTableID", reg, "public.reg_free", "Free", nil),
		op("RegisterTableTableIDTooLong", reg, "public.reg_free", "t"+strings.Repeat("a", 63), nil),
		op("RegisterTableTableID10MB", reg, "public.reg_free", tenMB, nil),
		op("RegisterTableUnicodeTableID", reg, "public.reg_free", "frée", nil),
		op("RegisterTableControlCharTableID", reg, "public.reg_free", "free\u0001", nil),
		op("RegisterTableNewlineTableID", reg, "public.reg_free", "free\n", nil),
		op("RegisterTableInjectionTableID", reg, "public.reg_free", "free'); DROP TABLE public.items; --", nil),
		op("RegisterTableTakenTableID", reg, "public.reg_free", "reg_ok", nil),
		op("RegisterTableAlreadyRegistered", reg, "public.reg_ok", "reg_ok2", nil),
		op("RegisterTableEmptyColumns", reg, "public.reg_free", "free", []string{}),
		op("RegisterTableNullColumn", reg, "public.reg_free", "free", []*string{nil}),
		op("RegisterTableColumnTwice", reg, "public.reg_free", "free", []string{"owner", "owner"}),
		op("RegisterTableMissingColumn", reg, "public.reg_free", "free", []string{"nope"}),
		op("RegisterTableInjectionColumn", reg, "public.reg_free", "free", []string{`owner"; DROP TABLE public.items; --`}),
		op("RegisterTableUnicodeColumn", reg, "public.reg_free", "free", []string{"ówner"}),
		op("RegisterTableControlCharColumn", reg, "public.reg_free", "free", []string{"owner\u0001"}),
		op("RegisterTableManyColumns", reg, "public.reg_free", "free", func() []string {
			cols := make([]string, 100000)
			for i := range cols {
				cols[i] = fmt.Sprintf("c%d", i)
			}
			return cols
		}()),
		op("RegisterTableCompositeKey", reg, "public.reg_comp", "comp", nil),
		op("RegisterTableNoKey", reg, "public.reg_nopk", "nopk", nil),
		op("RegisterTableTimestampKey", reg, "public.reg_tskey", "tskey", nil),
		op("RegisterTableReplicaIdentityFull", reg, "public.reg_full", "full", nil),
		op("RegisterTableUnlogged", reg, "public.reg_unlogged", "unlogged", nil),
		op("RegisterTableView", reg, "public.reg_view", "view", nil),
		op("RegisterTablePackTable", reg, "synchro.mutation_outcome", "outcomes", nil),
		op("RegisterTableCatalog", reg, "pg_catalog.pg_authid", "authid", nil),
		op("RegisterTableInjectionRelation", reg, inj, "inj", nil),
		op("RegisterTableUnicodeRelation", reg, `public."tåble ✓"`, "unicode", nil),
		op("RegisterTableControlCharRelation", reg, "public.\"ctl\x01\x1b\"", "ctl", nil),
		op("RegisterDependencyNullRelation", dep, nil, nil),
		op("RegisterDependencyEmptyColumns", dep, "public.reg_free", []string{}),
		op("RegisterDependencyMissingColumn", dep, "public.reg_free", []string{"nope"}),
		op("RegisterDependencyInjectionColumn", dep, "public.reg_free", []string{`k"); DROP TABLE public.items; --`}),
		op("RegisterDependencyCompositeKey", dep, "public.reg_comp", nil),
		op("RegisterDependencyInjectionRelation", dep, inj, nil),
		op("RegisterDependencyAlreadyRegistered", dep, "public.dep", nil),
		op("RegisterDependencyView", dep, "public.reg_view", nil),
		op("AddScopeRuleNullTableID", rule, nil, "owner:", "owner"),
		op("AddScopeRuleUnknownTableID", rule, "nope", "owner:", "owner"),
		op("AddScopeRuleInjectionTableID", rule, "reg_ok' OR '1'='1", "owner:", "owner"),
		op("AddScopeRuleDependencyAsTableID", rule, "dep", "owner:", "u"),
		op("AddScopeRuleTableID10MB", rule, tenMB, "owner:", "owner"),
		op("AddScopeRuleNullPrefix", rule, "reg_ok", nil, "owner"),
		op("AddScopeRuleEmptyPrefix", rule, "reg_ok", "", "owner"),
		op("AddScopeRulePrefixTooLong", rule, "reg_ok", strings.Repeat("p", 201), "owner"),
		op("AddScopeRulePrefix10MB", rule, "reg_ok", tenMB, "owner"),
		op("AddScopeRuleControlCharPrefix", rule, "reg_ok", "owner\u0001:", "owner"),
		op("AddScopeRuleNewlinePrefix", rule, "reg_ok", "owner\n:", "owner"),
		op("AddScopeRuleDELPrefix", rule, "reg_ok", "owner\u007f:", "owner"),
		op("AddScopeRuleC1ControlPrefix", rule, "reg_ok", "owner\u0085:", "owner"),
		op("AddScopeRuleNullColumn", rule, "reg_ok", "owner:", nil),
		op("AddScopeRuleUnknownColumn", rule, "reg_ok", "owner:", "nope"),
		op("AddScopeRuleInjectionColumn", rule, "reg_ok", "owner:", `owner" OR true; --`),
		op("AddScopeRuleUnicodeColumn", rule, "reg_ok", "owner:", "ówner"),
		op("AddScopeRuleViaNullVia", via, "reg_ok", "user:", "id", nil, "k", "u"),
		op("AddScopeRuleViaSyncedAsVia", via, "reg_ok", "user:", "id", "public.reg_ok", "id", "owner"),
		op("AddScopeRuleViaUnregisteredVia", via, "reg_ok", "user:", "id", "public.reg_free", "id", "owner"),
		op("AddScopeRuleViaInjectionVia", via, "reg_ok", "user:", "id", inj, "a", "b"),
		op("AddScopeRuleViaNullMatch", via, "reg_ok", "user:", "id", "public.dep", nil, "u"),
		op("AddScopeRuleViaNullScope", via, "reg_ok", "user:", "id", "public.dep", "k", nil),
		op("AddScopeRuleViaUnknownMatch", via, "reg_ok", "user:", "id", "public.dep", "nope", "u"),
		op("AddScopeRuleViaInjectionScope", via, "reg_ok", "user:", "id", "public.dep", "k", `u"; DROP TABLE public.items; --`),
		op("AddScopeRuleViaUnknownColumn", via, "reg_ok", "user:", "nope", "public.dep", "k", "u"),
		op("AddScopeRuleViaControlCharPrefix", via, "reg_ok", "user\u001b:", "id", "public.dep", "k", "u"),
		op("AddScopeRuleViaEmptyPrefix", via, "reg_ok", "", "id", "public.dep", "k", "u"),
		op("SetScopeAuthorizerNotSecurityDefiner", authz, "public.authz_invoker(text, text)"),
		op("SetScopeAuthorizerInjectionName", authz, `public."x'); DROP TABLE public.items; --"(text, text)`),
		op("SetScopeAuthorizerWrongResult", authz, "public.authz_wrong_result(text, text)"),
		op("SetScopeAuthorizerProcedure", authz, "public.authz_proc(text, text)"),
		op("SetScopeAuthorizerWrongArguments", authz, "pg_catalog.now()"),
		op("SetScopeAuthorizerSuperuserBuiltin", authz, "pg_catalog.texteq(text, text)"),
		op("RetryPoisonWithoutStream", `SELECT synchro.retry_poison()`),
		op("BeginResetWithoutStream", `SELECT synchro.begin_reset('no stream yet')`),
		op("CompactNull", `SELECT synchro.compact($1::interval)`, nil),
		op("CompactNegative", `SELECT synchro.compact('-1 hour')`),
	}
	cases = append(cases, hostileCase{name: "CompactWithoutStream", operator: true, sql: `SELECT synchro.compact('178000000 years')`})
	runHostile(t, db, cases)
}

// Activation takes no arguments: what is hostile is the staged state. Each case gets
// its own database, the state staged and committed, then activate_registry as the
// operator.
func TestHostileActivation(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, setup string }{
		{"NothingStaged", `CREATE TABLE public.t (id int8 PRIMARY KEY);
			SELECT synchro.register_table('public.t', 't'); SELECT synchro.activate_registry();`},
		{"NestedPrefixes", `CREATE TABLE public.t (id int8 PRIMARY KEY, o text);
			SELECT synchro.register_table('public.t', 't');
			SELECT synchro.add_scope_rule('t', 'own', 'o'); SELECT synchro.add_scope_rule('t', 'owner:', 'o');`},
		{"InjectionPrefixesNested", `CREATE TABLE public.t (id int8 PRIMARY KEY, o text);
			SELECT synchro.register_table('public.t', 't');
			SELECT synchro.add_scope_rule('t', 'x''; DROP TABLE public.t; --', 'o');
			SELECT synchro.add_scope_rule('t', 'x''; DROP TABLE public.t; -- :', 'o');`},
		{"DroppedRuleColumn", `CREATE TABLE public.t (id int8 PRIMARY KEY, o text);
			SELECT synchro.register_table('public.t', 't');
			SELECT synchro.add_scope_rule('t', 'owner:', 'o');
			ALTER TABLE public.t DROP COLUMN o;`},
		{"RenamedRelation", `CREATE TABLE public.t (id int8 PRIMARY KEY);
			SELECT synchro.register_table('public.t', 't');
			ALTER TABLE public.t RENAME TO "t'; DROP TABLE public.t; --";`},
		{"KeyBecameComposite", `CREATE TABLE public.t (id int8 NOT NULL, b int NOT NULL DEFAULT 0, CONSTRAINT t_pkey PRIMARY KEY (id));
			SELECT synchro.register_table('public.t', 't');
			ALTER TABLE public.t DROP CONSTRAINT t_pkey, ADD CONSTRAINT t_pkey PRIMARY KEY (id, b);`},
		{"ReplicaIdentityFull", `CREATE TABLE public.t (id int8 PRIMARY KEY);
			SELECT synchro.register_table('public.t', 't');
			ALTER TABLE public.t REPLICA IDENTITY FULL;`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			mustExec(t, db, tc.setup)
			runHostile(t, db, []hostileCase{{name: "Activate", operator: true, sql: `SELECT synchro.activate_registry()`, code: "SY400"}})
		})
	}
}

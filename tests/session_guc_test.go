package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Session state other than standard_conforming_strings (an independent review,
// 2026-12-04, found four bugs here, each red before its fix): the pack's code runs in
// the caller's session, with the caller's settings. Each test
// here opens a session with settings a synchro_app login (or any writer of a
// registered table) may choose, and checks that the pack's refusals, renderings and
// comparisons do not change with them.

// reviewSession opens a session of the test database with the given startup settings.
func reviewSession(t *testing.T, url string, settings map[string]string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	for k, v := range settings {
		cfg.RuntimeParams[k] = v
	}
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func sqlstateOf(err error) string {
	if pe, ok := err.(*pgconn.PgError); ok {
		return pe.Code
	}
	return ""
}

// TestFenceMeasuresUnderRunnerSettings: the fence's size refusals measured values in
// the writer's session, with its extra_float_digits. A float8 that prints "1.2" at
// extra_float_digits = -15 is "1.2345678901234567" as the runner renders it, so a row
// the fence refuses at the runner's settings passed from such a session: for the whole
// row's 128 MiB check that meant a row the walsender could not render (over 1 GB, at
// every restart: the stream stopped for good; found by review). The fence now renders
// under the runner's settings. Shown here on the registered values' 32 MiB check (a
// float8[] of 1.8 million elements: about 36 MB as the image holds it, 7 MB at -15),
// which is the same mechanism at a size a test can afford.
func TestFenceMeasuresUnderRunnerSettings(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE rv_big (id int8 PRIMARY KEY, samples float8[]);
		SELECT synchro.register_table('rv_big', 'rv_big');
		SELECT synchro.activate_registry();`)
	const insert = `INSERT INTO rv_big (id, samples)
		VALUES ($1, pg_catalog.array_fill(1.2345678901234567::float8, ARRAY[$2::int]))`
	for _, efd := range []string{"3", "1", "-15"} {
		c := reviewSession(t, db.URL, map[string]string{"extra_float_digits": efd})
		_, err := c.Exec(ctx, insert, 1, 1800000)
		require.Error(t, err, "extra_float_digits %s", efd)
		require.Equal(t, "22001", sqlstateOf(err), err.Error())
		_, err = c.Exec(ctx, insert, 2, 1000)
		require.NoError(t, err, "a small row from extra_float_digits %s", efd)
		_, err = c.Exec(ctx, `DELETE FROM rv_big`)
		require.NoError(t, err)
	}
}

// canonicalSettings are the runner's pinned settings (runner/conn.go), which the
// contract's row images are rendered with.
var canonicalSettings = map[string]string{
	"TimeZone": "UTC", "DateStyle": "ISO", "IntervalStyle": "postgres", "extra_float_digits": "3",
}

func pushVia(t *testing.T, c *pgx.Conn, client, mutations string) map[string]any {
	t.Helper()
	var out string
	require.NoError(t, c.QueryRow(context.Background(), `SELECT synchro.push($1, $2::jsonb)::text`, client, mutations).Scan(&out))
	var res struct {
		Results []map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Results, 1, out)
	return res.Results[0]
}

func newUUID() string {
	b := randomSuffix() + randomSuffix() + randomSuffix()
	return fmt.Sprintf("%s-%s-4%s-8%s-%s", b[0:8], b[8:12], b[13:16], b[17:20], b[20:32])
}

// TestPushRowWhateverByteaOutput: push's row images are rendered "whatever the
// caller's session settings, so the same row always renders to the same JSON"
// (CONTRACT.md, Row images). _push_run pinned TimeZone, DateStyle, IntervalStyle and
// extra_float_digits, but not bytea_output: to_jsonb of a bytea column followed the
// caller's bytea_output, so a caller with bytea_output = escape got another JSON for the
// same row than pull, rebuild and every other push caller (the image the runner
// materializes is hex). It pins bytea_output (and xmloption) now.
func TestPushRowWhateverByteaOutput(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE rv_blobs (id text PRIMARY KEY, b bytea);
		SELECT synchro.register_table('rv_blobs', 'rv_blobs');
		SELECT synchro.activate_registry();`)
	std := reviewSession(t, db.URL, canonicalSettings)
	esc := reviewSession(t, db.URL, map[string]string{"bytea_output": "escape"})
	ins := func(c *pgx.Conn, key string) map[string]any {
		return pushVia(t, c, "rv_client", fmt.Sprintf(
			`[{"id": %q, "table": "rv_blobs", "op": "insert", "pk": %q, "row": {"b": "\\x0102616263"}}]`, newUUID(), key))
	}
	a := ins(std, "std")
	b := ins(esc, "esc")
	require.Equal(t, "accepted", a["status"], a)
	require.Equal(t, "accepted", b["status"], b)
	var canonical string
	require.NoError(t, std.QueryRow(ctx, `SELECT to_jsonb(b)::text FROM rv_blobs WHERE id = 'esc'`).Scan(&canonical))
	t.Logf("push row from a bytea_output=escape session: %v; canonical image of the same value: %s", b["row"], canonical)
	require.Equal(t, a["row"].(map[string]any)["b"], b["row"].(map[string]any)["b"],
		"the same bytea value renders to another JSON for a caller with bytea_output = escape")
}

// oddSettings are session settings a writer or a synchro_app caller may choose, each
// of which changes how PostgreSQL parses, renders, compares, plans or checks
// something in that session.
var oddSettings = map[string]string{
	"DateStyle":                      "SQL, DMY",
	"IntervalStyle":                  "sql_standard",
	"TimeZone":                       "Pacific/Chatham",
	"extra_float_digits":             "-15",
	"bytea_output":                   "hex", // escape: TestPushRowWhateverByteaOutput
	"array_nulls":                    "off",
	"backslash_quote":                "off",
	"transform_null_equals":          "on",
	"default_transaction_isolation":  "serializable",
	"default_transaction_deferrable": "on",
	"xmloption":                      "document",
	"synchro.push_active":            "on",
	"work_mem":                       "64kB",
	"enable_indexscan":               "off",
	"enable_bitmapscan":              "off",
	"enable_hashjoin":                "off",
	"enable_mergejoin":               "off",
	"enable_hashagg":                 "off",
	"plan_cache_mode":                "force_custom_plan",
	"jit":                            "on",
	"jit_above_cost":                 "0",
	"geqo_threshold":                 "2",
	"row_security":                   "off",
	"search_path":                    "pg_temp, public",
	"application_name":               "synchro-runner",
	"lc_monetary":                    "C.utf8",
	"lc_numeric":                     "C.utf8",
}

const kindsTable = `
	CREATE TABLE rv_kinds (id text PRIMARY KEY, owner text, f8 float8, f8a float8[], f4 real,
	  ts timestamptz, tsa timestamptz[], tl timestamp, d date, iv interval, iva interval[],
	  n numeric, ta text[], j json, jb jsonb, tm time, ttz timetz, b bytea, m money, x xml, pt point);
	SELECT synchro.register_table('rv_kinds', 'rv_kinds');
	SELECT synchro.add_scope_rule('rv_kinds', 'owner:', 'owner');
	SELECT synchro.activate_registry();`

// TestOddSessionKeepsStream: direct writes (a first fence, a second change of
// the row in one transaction, a delete), a push insert and update, pull and rebuild,
// all from a session with oddSettings and pg_temp objects named like the pack's tables,
// materialize without a quarantine into images equal to to_jsonb at the canonical
// settings; pull and rebuild answer as in a canonical session; push's rows equal the
// materialized images.
func TestOddSessionKeepsStream(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, kindsTable)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	odd := reviewSession(t, db.URL, oddSettings)
	var iso string
	require.NoError(t, odd.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&iso))
	require.Equal(t, "serializable", iso)
	_, err := odd.Exec(ctx, `
		CREATE TEMP TABLE row_version (relation_id bigint, pk text, version text);
		CREATE TEMP TABLE server_key (inner_pad bytea, outer_pad bytea);
		CREATE TEMP TABLE push_context (txid xid8, client_id text, mutation_id uuid, relation_id bigint, pk text);
		CREATE TEMP TABLE progress (stream_generation bigint);
		CREATE TEMP TABLE relation (relation_id bigint);
		CREATE TEMP VIEW setting AS SELECT 'scope_authorizer'::text AS name, 'x'::text AS value;`)
	require.NoError(t, err)
	// Literals parsed with the odd session's DateStyle (DMY), TimeZone, IntervalStyle.
	_, err = odd.Exec(ctx, `
		INSERT INTO rv_kinds VALUES ('a', 'o', 0.1, ARRAY[1.2345678901234567, 5e-324, 'NaN'], 3.4028235e38,
		  '01/02/2024 10:00', ARRAY['01/02/2024 10:00'::timestamptz], '02/03/2024 11:00', '03/04/2024',
		  '-1-2 +3 -4:05:06.789', ARRAY['1-2'::interval], 123.4500, '{NULL,"a\\b"}', '{"a": 1.0}', '{"a": [1e2]}',
		  '10:00', '10:00+05:45', '\x00ff', 12.34, '<a>x</a>', '(1.2345678901234567,2)');
		INSERT INTO rv_kinds (id, owner) VALUES ('gone', 'o');`)
	require.NoError(t, err)
	_, err = odd.Exec(ctx, `BEGIN;
		UPDATE rv_kinds SET f8 = 2.2250738585072014e-308 WHERE id = 'a';
		UPDATE rv_kinds SET ts = '31/12/2023 23:59:59.999999' WHERE id = 'a';
		DELETE FROM rv_kinds WHERE id = 'gone';
		COMMIT`)
	require.NoError(t, err)
	ins := pushVia(t, odd, "rv_client", fmt.Sprintf(`[{"id": %q, "table": "rv_kinds", "op": "insert", "pk": "p",
		"row": {"owner": "o", "f8": 1.2345678901234567, "ts": "2024-01-02 03:04:05", "iv": "1 day 02:00:00",
		        "d": "2024-03-04", "f8a": [0.1, 1e300], "tsa": ["2024-01-02T03:04:05+05:45"]}}]`, newUUID()))
	require.Equal(t, "accepted", ins["status"], ins)
	upd := pushVia(t, odd, "rv_client", fmt.Sprintf(`[{"id": %q, "table": "rv_kinds", "op": "update", "pk": "p",
		"base_version": %q, "row": {"f4": 1.1, "iva": ["-1 days +02:00:00"]}}]`, newUUID(), ins["version"]))
	require.Equal(t, "accepted", upd["status"], upd)
	mustExec(t, db, `INSERT INTO rv_kinds (id, owner) VALUES ('later', 'o')`)
	eventually(t, 60*time.Second, "the writes materialized", func() bool {
		return len(quarantines(t, db)) > 0 || countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = 'later'`) == 1
	})
	require.Empty(t, quarantines(t, db))

	// The images are to_jsonb of the live rows at the canonical settings.
	std := reviewSession(t, db.URL, canonicalSettings)
	var bad int
	require.NoError(t, std.QueryRow(ctx, `
		SELECT count(*) FROM rv_kinds t FULL JOIN (SELECT p.* FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
		                                            WHERE r.table_id = 'rv_kinds') p ON p.pk = t.id
		 WHERE p.image IS DISTINCT FROM to_jsonb(t)`).Scan(&bad))
	require.Zero(t, bad, "materialized images differ from to_jsonb at the canonical settings")
	var img string
	require.NoError(t, std.QueryRow(ctx, `SELECT image::text FROM synchro.projection WHERE pk = 'p'`).Scan(&img))
	pushed, err := json.Marshal(upd["row"])
	require.NoError(t, err)
	require.JSONEq(t, img, string(pushed), "push's row is the materialized image")

	// pull and rebuild answer the same in both sessions.
	_, cur := startScope(t, db, "rv_client", "owner:o")
	read := func(c *pgx.Conn, q string, args ...any) string {
		var s string
		require.NoError(t, c.QueryRow(ctx, q, args...).Scan(&s), q)
		return s
	}
	mustExec(t, db, `UPDATE rv_kinds SET n = 1e-20 WHERE id = 'a'`)
	eventually(t, 60*time.Second, "the update materialized", func() bool {
		return len(quarantines(t, db)) > 0 || textOf(t, db, `SELECT image ->> 'n' FROM synchro.projection WHERE pk = 'a'`) == "0.00000000000000000001"
	})
	pullQ := `SELECT synchro.pull('rv_client', 'owner:o', $1, 10)::text`
	require.Equal(t, read(std, pullQ, cur), read(odd, pullQ, cur), "pull")
	rebQ := `SELECT (synchro.rebuild('rv_client', 'owner:o', NULL, 10) - 'session')::text`
	require.Equal(t, read(std, rebQ), read(odd, rebQ), "rebuild")
}

// TestPlpgsqlExtraChecks: plpgsql.extra_errors and extra_warnings are the
// caller's (PGC_USERSET) and apply when a function is compiled in its session. With
// every check on, the fence (first fence and the full check), push, pull and rebuild
// still work: an error there would only fail the caller's own statement, but would
// show a pack function whose behavior depends on the caller's compile options.
func TestPlpgsqlExtraChecks(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, kindsTable)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	c := reviewSession(t, db.URL, map[string]string{"plpgsql.extra_errors": "all", "plpgsql.extra_warnings": "all"})
	_, err := c.Exec(ctx, `INSERT INTO rv_kinds (id, owner, f8a, j) VALUES ('a', 'o', '{1,2}', '[1]')`)
	require.NoError(t, err, "first fence")
	_, err = c.Exec(ctx, `BEGIN; UPDATE rv_kinds SET f8 = 1 WHERE id = 'a'; UPDATE rv_kinds SET f8 = 2 WHERE id = 'a'; COMMIT`)
	require.NoError(t, err, "full check")
	ins := pushVia(t, c, "rv_client", fmt.Sprintf(`[{"id": %q, "table": "rv_kinds", "op": "insert", "pk": "p", "row": {"owner": "o"}}]`, newUUID()))
	require.Equal(t, "accepted", ins["status"], ins)
	mustExec(t, db, `INSERT INTO rv_kinds (id, owner) VALUES ('later', 'o')`)
	eventually(t, 60*time.Second, "the writes materialized", func() bool {
		return len(quarantines(t, db)) > 0 || countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = 'later'`) == 1
	})
	require.Empty(t, quarantines(t, db))
	var s string
	require.NoError(t, c.QueryRow(ctx, `SELECT synchro.rebuild('rv_client', 'owner:o', NULL, 10)::text`).Scan(&s), "rebuild")
	var page struct {
		Cursor string `json:"cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(s), &page))
	require.NoError(t, c.QueryRow(ctx, `SELECT synchro.pull('rv_client', 'owner:o', $1, 10)::text`, page.Cursor).Scan(&s), "pull")
	require.NoError(t, c.QueryRow(ctx, `SELECT synchro.ready()::text`).Scan(&s), "ready")
}

// TestCopyFreezeRefusedWhateverItsSpelling: COPY ... FREEZE into a registered
// relation is refused at the source (0A000, CONTRACT.md "Source guards"). The fence
// recognizes it by a regular expression on the statement text (\mcopy\M.*\mfreeze\M),
// but an option name is an identifier, and U&"fr\0065eze" is the same option. The
// table's owner (the application) can give the table a new file in its transaction
// (CLUSTER), which is what COPY FREEZE needs.
func TestCopyFreezeRefusedWhateverItsSpelling(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE rv_frozen (id text PRIMARY KEY, owner text);
		SELECT synchro.register_table('rv_frozen', 'rv_frozen');
		SELECT synchro.activate_registry();`)
	copyIn := func(stmt string) error {
		c := reviewSession(t, db.URL, nil)
		_, err := c.Exec(ctx, `BEGIN; CLUSTER rv_frozen USING rv_frozen_pkey`)
		require.NoError(t, err)
		_, err = c.PgConn().CopyFrom(ctx, strings.NewReader("k1\to\n"), stmt)
		_, _ = c.Exec(ctx, `COMMIT`)
		return err
	}
	// The plain spelling is refused.
	err := copyIn(`COPY rv_frozen (id, owner) FROM STDIN (FREEZE)`)
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstateOf(err), err.Error())
	err = copyIn(`COPY rv_frozen (id, owner) FROM STDIN (U&"fr\0065eze")`)
	if err == nil {
		// Evidence that the rows went in frozen: the page's visibility map bits.
		var vm string
		if _, verr := db.Pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_visibility`); verr == nil {
			require.NoError(t, db.Pool.QueryRow(ctx,
				`SELECT string_agg(format('blk%s all_visible=%s all_frozen=%s', blkno, all_visible, all_frozen), '; ')
				   FROM pg_visibility_map('rv_frozen')`).Scan(&vm))
			t.Logf("COPY FREEZE committed into the registered table: %s", vm)
		}
	}
	require.Error(t, err, "COPY FREEZE spelled with a Unicode-escaped option name passed the fence")
	require.Equal(t, "0A000", sqlstateOf(err), err.Error())
}

// TestUnreadableValueRefusedAtSource: "a value PostgreSQL accepted must never
// poison the stream (refuse it at the source)". Materialization casts each registered
// column's WAL text back to its built-in type (synchro._image_sql), and registration
// refuses the types whose text does not read back (synchro._render_unreadable: the OID
// aliases, int2vector, pg_node_tree, ...). Two built-in types were missing there, and
// any writer of the table (here a synchro_app login with INSERT) stored a value whose
// text materialization could not read: the fence let it through, the transaction was
// quarantined and the stream blocked for everyone. aclitem (and gtsvector) columns
// are refused at registration now, and the fence refuses xml that is not well-formed
// content (2200N).
//   - aclitem (and aclitem[]): its text names roles; aclitemout prints a role that
//     does not exist as its number and aclitemin looks every name up (42704).
//     makeaclitem (PUBLIC) takes any OID; a grantee dropped before the runner catches
//     up does the same.
//   - xml: xmlroot(x, version '<text>') splices its version text into the XML
//     declaration unescaped, so the stored value is not well-formed, and xml_in refuses
//     its text (2200N).
func TestUnreadableValueRefusedAtSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, col, value string }{
		{"aclitem", "aclitem[]", `ARRAY[pg_catalog.makeaclitem(4000000000, 10, 'SELECT', false)]`},
		{"xml", "xml", `xmlroot(xml '<a/>', version '1.0"?><x')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			ctx := context.Background()
			mustExec(t, db, `CREATE TABLE rv_vals (id text PRIMARY KEY, owner text, v `+tc.col+`)`)
			_, err := db.Pool.Exec(ctx, `SELECT synchro.register_table('rv_vals', 'rv_vals')`)
			if tc.name == "aclitem" {
				// A type whose text does not read back: registration refuses the column.
				requireSQLState(t, err, "SY400")
				return
			}
			require.NoError(t, err)
			mustExec(t, db, `SELECT synchro.activate_registry()`)
			startRunner(t, testRunnerConfig(t, db))
			waitStream(t, db)
			h := newHostileApp(t, db, false)
			mustExec(t, db, `GRANT INSERT, SELECT ON rv_vals TO `+h.ident)
			_, err = h.conn.Exec(ctx, `INSERT INTO public.rv_vals (id, owner, v) VALUES ('x', 'o', `+tc.value+`)`)
			if err != nil {
				// Refused at the source: what the rule asks for.
				require.Equal(t, "2200N", sqlstateOf(err), err.Error())
				return
			}
			mustExec(t, db, `INSERT INTO rv_vals (id, owner) VALUES ('later', 'o')`)
			eventually(t, 60*time.Second, "the writes materialized or quarantined", func() bool {
				return len(quarantines(t, db)) > 0 || countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = 'later'`) == 1
			})
			q := quarantines(t, db)
			if len(q) > 0 {
				t.Logf("quarantine: %+v", q[0])
			}
			require.Empty(t, q, "a value PostgreSQL accepted (and the fence let through) poisoned the stream")
		})
	}
}

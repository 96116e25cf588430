package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Row images are rendered from the registered shape without running any code of the
// application's (synchro._image_sql), and still equal to_jsonb() of the registered
// columns for every supported kind of type: built-ins, arrays, domains (their CHECK
// is not run again), enums and arrays of them, json and jsonb. The baseline, the
// per-transaction path and the set-based path render alike.
const imageSchema = `
CREATE TYPE public.mood AS ENUM ('ok', 'sad', 'has space');
CREATE DOMAIN public.small AS int4 CHECK (VALUE < 1000);
CREATE DOMAIN public.doc AS jsonb;
CREATE TABLE public.kinds (
  id int8 PRIMARY KEY,
  i2 int2, i4 int4, n numeric, n2 numeric(10, 2), f4 float4, f8 float8, b bool,
  t text, vc varchar(5), ch char(3), "by" bytea, u uuid,
  ts timestamp, tz timestamptz, d date, tm time, iv interval,
  j json, jb jsonb, ta text[], ia int4[], r int4range, ip inet, pt point, bits bit(4),
  m public.mood, ms public.mood[], sm public.small, sms public.small[], dj public.doc);
INSERT INTO public.kinds VALUES (1, 1, 2, 3.5, 4.25, 1.5, 'NaN', true, 'baseline', 'ab', 'x', '\x00ff', gen_random_uuid(),
  '2026-12-01 10:00:00', '2026-12-01 10:00:00+02', '2026-12-01', '10:00', '1 day 02:00', '{"k": [1, "two"]}', '{"b": 1, "a": 2}',
  '{a,"b c"}', '{1,2}', '[1,5)', '10.0.0.1/8', '(1,2)', B'1010', 'has space', '{ok,sad}', 7, '{1,2}', '{"x": null}');
SELECT synchro.register_table('public.kinds', 'kinds');
SELECT synchro.add_scope_rule('kinds', 'all:', 't');
SELECT synchro.activate_registry();`

// requireImages requires every projected row of public.<table> (table_id table, key id)
// to have the image want, an SQL expression over the live row k.
func requireImages(t *testing.T, db *testdb.DB, what, table, want string) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT k.id, p.image = `+want+`, p.image::text, (`+want+`)::text
		  FROM public.`+table+` k JOIN synchro.projection p ON p.pk = k.id::text
		 WHERE p.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = $1)
		 ORDER BY k.id`, table)
	require.NoError(t, err)
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		var eq bool
		var got, exp string
		require.NoError(t, rows.Scan(&id, &eq, &got, &exp))
		require.True(t, eq, "%s: %s row %d\n got: %s\nwant: %s", what, table, id, got, exp)
		n++
	}
	require.NoError(t, rows.Err())
	require.Positive(t, n, what)
}

func TestImageRendersEveryKindLikeToJSONB(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, imageSchema)
	db := e.db
	same := func(what string) {
		t.Helper()
		requireImages(t, db, what, "kinds", "to_jsonb(k)")
	}
	same("baseline")

	// One source transaction alone (per-transaction path: it also moves a row between
	// scopes and the set-based path may take it; both must render alike).
	write(t, db, `
		INSERT INTO public.kinds VALUES (2, -1, -2, -3.5, 0.1, 'Infinity', '-Infinity', false, 'a"b\c', 'é', 'ü', '', NULL,
		  'infinity', '2026-01-01 00:00:00.123456+00', '-infinity', '23:59:59.999', '-1 mon 3 days', '"s"', '[]',
		  '{}', '{NULL,3}', 'empty', '::1', '(0.5,-1)', B'0000', 'ok', '{}', -5, '{}', '[1, {"a": null}]');
		UPDATE public.kinds SET t = 'moved', m = 'sad', j = 'null' WHERE id = 1;`)
	same("materialized")
	// NULL everywhere but the key.
	write(t, db, `INSERT INTO public.kinds (id) VALUES (3)`)
	same("nulls")
}

func TestRegisterRefusesTypesImagesCannotRenderSafely(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `
		CREATE TYPE public.pair AS (a int, b int);
		CREATE TYPE public.float_range AS RANGE (subtype = float8);
		CREATE TABLE public.composite_t (id int8 PRIMARY KEY, p public.pair);
		CREATE TABLE public.range_t (id int8 PRIMARY KEY, r public.float_range);
		CREATE TABLE public.array_t (id int8 PRIMARY KEY, ps public.pair[]);`)
	for _, tc := range []struct{ table, column string }{
		{"composite_t", "p"}, {"range_t", "r"}, {"array_t", "ps"},
	} {
		_, err := db.Pool.Exec(context.Background(), `SELECT synchro.register_table($1::regclass, $2)`, "public."+tc.table, tc.table)
		pgErr := requireSQLState(t, err, "SY400")
		require.Contains(t, pgErr.Message, "column "+tc.column)
	}
	// Registering the other columns only is fine.
	mustExec(t, db, `SELECT synchro.register_table('public.composite_t', 'composite_t', ARRAY['id']::name[])`)
}

// Built-in types whose WAL text does not read back as the same value in the pack's
// session are refused too (synchro._render_unreadable): an OID alias prints a name by
// the writer's search_path ('public.docs' arrives as 'docs', which the pack's pinned
// path cannot find: 42P01), int2vector and oidvector print as '1 2', not as an array,
// and pg_node_tree has no input function. Registered, one such value quarantined a good
// transaction. Generated columns are left out of "every column" and refused by name:
// logical replication does not carry them, so one registered read as relation drift
// (SYP03) at the table's first write.
func TestRegisterRefusesValuesThatDoNotReadBack(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `
		CREATE DOMAIN public.rel AS regclass;
		CREATE TABLE public.reg_t (id int8 PRIMARY KEY, r regclass);
		CREATE TABLE public.regarr_t (id int8 PRIMARY KEY, r public.rel[]);
		CREATE TABLE public.vec_t (id int8 PRIMARY KEY, v int2vector);
		CREATE TABLE public.node_t (id int8 PRIMARY KEY, n pg_node_tree);
		CREATE TABLE public.gen_t (id int8 PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 2) STORED);
		CREATE TABLE public.genkey_t (a int, id int8 GENERATED ALWAYS AS (a + 1) STORED PRIMARY KEY);`)
	for _, tc := range []struct{ table, column string }{
		{"reg_t", "r"}, {"regarr_t", "r"}, {"vec_t", "v"}, {"node_t", "n"},
	} {
		_, err := db.Pool.Exec(context.Background(), `SELECT synchro.register_table($1::regclass, $2)`, "public."+tc.table, tc.table)
		pgErr := requireSQLState(t, err, "SY400")
		require.Contains(t, pgErr.Message, "column "+tc.column)
	}
	_, err := db.Pool.Exec(context.Background(), `SELECT synchro.register_table('public.gen_t', 'gen_t', ARRAY['a', 'g']::name[])`)
	pgErr := requireSQLState(t, err, "SY400")
	require.Contains(t, pgErr.Message, "column g is generated")
	_, err = db.Pool.Exec(context.Background(), `SELECT synchro.register_table('public.genkey_t', 'genkey_t')`)
	pgErr = requireSQLState(t, err, "SY400")
	require.Contains(t, pgErr.Message, "column id is generated")

	// Every column: the generated one is left out, and writes flow.
	mustExec(t, db, `SELECT synchro.register_table('public.gen_t', 'gen_t');
		SELECT synchro.add_scope_rule('gen_t', 'a:', 'a');
		SELECT synchro.activate_registry();`)
	require.Equal(t, "{id,a}", textOf(t, db, `SELECT g.columns::text FROM synchro.registration g
		JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'gen_t' ORDER BY g.generation DESC LIMIT 1`))
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO public.gen_t (id, a) VALUES (1, 5)`)
	eventually(t, 30*time.Second, "the generated table's row", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE table_id = 'gen_t'`) == 1
	})
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`))
	require.Equal(t, `{"a": 5, "id": 1}`, textOf(t, db, `SELECT image::text FROM synchro.effect WHERE table_id = 'gen_t'`))
	require.NoError(t, rr.stop(t))
}

// Column names that are SQL keywords PL/pgSQL refuses after NEW. (by, in, loop) work
// as keys and as registered columns: the generated fence quotes every field.
func TestFenceKeywordColumnNames(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, `
		CREATE TABLE public.kw ("by" int8 PRIMARY KEY, "in" text, "loop" bytea, "select" json);
		SELECT synchro.register_table('public.kw', 'kw');
		SELECT synchro.add_scope_rule('kw', 'in:', 'in');
		SELECT synchro.activate_registry();`)
	write(t, e.db, `INSERT INTO public.kw VALUES (1, 'a', '\x01', '{"x": 1}'); UPDATE public.kw SET "in" = 'b' WHERE "by" = 1`)
	write(t, e.db, `DELETE FROM public.kw WHERE "by" = 1`)
	require.Equal(t, 2, countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE table_id = 'kw'`),
		"the net upsert into in:b of the first transaction, then the delete")
}

// A relation whose registered columns all have a type the runner stages in its image
// shape (bool, integers, text, varchar, uuid, json, jsonb) takes the staged object as
// its row image, without rendering it again (synchro._image_sql), exactly when that
// object has the registered columns and nothing else: the image equals to_jsonb() of
// the registered columns for extreme values, NULLs and JSON documents, and a staged
// object with more columns (a REPLICA IDENTITY FULL table registers a subset: the
// runner stages its unregistered identity columns too) still renders only the
// registered ones. Red when the runner stages a boolean or an integer as a string, or
// when the fast path takes an object with an extra column.
func TestImageStagedAsImage(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, `
CREATE TABLE public.plain (
  id int8 PRIMARY KEY, i2 int2, i4 int4, b bool, t text, vc varchar(5), u uuid, j json, jb jsonb);
CREATE TABLE public.full_ri (id int8 PRIMARY KEY, owner text, secret text, n int4);
INSERT INTO public.plain VALUES (1, 1, 2, true, 'baseline', 'ab', gen_random_uuid(), '{"k": [1, "two"]}', '{"b": 1}');
INSERT INTO public.full_ri VALUES (1, 'o', 'hidden', 1);
SELECT synchro.register_table('public.plain', 'plain');
SELECT synchro.add_scope_rule('plain', 'all:', 't');
SELECT synchro.register_table('public.full_ri', 'full_ri');
SELECT synchro.add_scope_rule('full_ri', 'owner:', 'owner');
SELECT synchro.activate_registry();
SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'full_ri'), ARRAY['owner', 'n']);
SELECT synchro.activate_registry();`)
	db := e.db
	check := func(what string) {
		t.Helper()
		requireImages(t, db, what, "plain", "to_jsonb(k)")
		requireImages(t, db, what, "full_ri", "to_jsonb(k) - 'secret'")
	}
	check("baseline")
	write(t, db, `
		INSERT INTO public.plain VALUES
		  (2, -32768, -2147483648, false, 'a"b\c
		  tab	é 😀', 'é', '00000000-0000-0000-0000-000000000000', '{"a": 1, "a": 2, "n": null}', '[1, {"z": [true]}]'),
		  (3, 32767, 2147483647, true, '', '', NULL, 'null', '"s"'),
		  (-9223372036854775808, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL),
		  (9223372036854775807, NULL, -1, false, 'max', 'x', NULL, '[]', '{}');
		INSERT INTO public.full_ri VALUES (2, 'p', 'hidden too', -7), (3, 'o', NULL, NULL);`)
	check("inserted")
	write(t, db, `
		UPDATE public.plain SET b = NOT b, i4 = i4 - 1, t = 'moved' WHERE id = 1;
		UPDATE public.full_ri SET owner = 'p', secret = 'changed' WHERE id = 1;
		DELETE FROM public.full_ri WHERE id = 3;`)
	check("updated")
}

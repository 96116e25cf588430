package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Protocol and data edges between PostgreSQL's logical decoding and the runner, from an
// independent review (2026-12-04). One was a bug (a registered column dropped and added
// again went unseen: TestRegisteredColumnDropReaddDetected); two more, a same-type
// rewrite with USING and an enum value renamed, are documented as undetected
// (docs/bootstrap.md, "Drift"). The rest pin scenarios that were checked and hold.

// protoSettle waits until the runner processed every WAL written so far, or a
// quarantine record exists. It returns the quarantines.
func protoSettle(t *testing.T, db *testdb.DB) []quarantineRow {
	t.Helper()
	var target string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target))
	var q []quarantineRow
	eventually(t, 60*time.Second, "the runner to process everything (or quarantine)", func() bool {
		q = quarantines(t, db)
		if len(q) > 0 {
			return true
		}
		return countOf(t, db, `SELECT count(*) FROM synchro.progress WHERE processed_end_lsn >= $1::pg_lsn`, target) == 1
	})
	return q
}

// protoDiverged lists the rows of table (an SQL relation name) whose materialized
// projection differs from the live row's registered columns (cols; nil: every column),
// as "pk: live | materialized".
func protoDiverged(t *testing.T, db *testdb.DB, table, tableID, key string, cols []string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO'; SET LOCAL IntervalStyle = 'postgres';
		SET LOCAL extra_float_digits = 3`)
	require.NoError(t, err)
	img := `to_jsonb(x)`
	if cols != nil {
		img = `(SELECT jsonb_object_agg(j.key, j.value) FROM jsonb_each(to_jsonb(x)) j WHERE j.key = ANY($2::text[]))`
	}
	q := fmt.Sprintf(`
		SELECT coalesce(live.pk, mat.pk) || ': ' || coalesce(left(live.image::text, 300), '<none>') || ' | ' || coalesce(left(mat.image::text, 300), '<none>')
		  FROM (SELECT x.%s::text AS pk, %s AS image FROM %s x) live
		  FULL JOIN (SELECT p.pk, p.image FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
		              WHERE r.table_id = $1) mat ON mat.pk = live.pk
		 WHERE mat.image IS DISTINCT FROM live.image
		 ORDER BY 1`, pgx.Identifier{key}.Sanitize(), img, table)
	args := []any{tableID}
	if cols != nil {
		args = append(args, cols)
	} else {
		q = strings.Replace(q, "$1", "$1::text", 1)
	}
	rows, err := tx.Query(ctx, q, args...)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// protoRestart stops rr and starts a new runner (the WAL written meanwhile is a backlog
// the new one materializes in batches).
func protoRestart(t *testing.T, db *testdb.DB, rr *runningRunner) *runningRunner {
	t.Helper()
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
	return startRunner(t, testRunnerConfig(t, db))
}

// registryReady is the ok of readiness's registry check.
func registryReady(t *testing.T, db *testdb.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT ok FROM synchro.readiness() WHERE check_name = 'registry'`).Scan(&ok))
	return ok
}

// Unchanged TOAST ('u' in pgoutput, a column left out by wal2json) in every place a
// source transaction can put it: an update after an insert of the same row in the same
// transaction (the prior image is transaction-local, not durable), a delete and
// re-insert of the key followed by an update in one transaction, an update of an
// unregistered out-of-line column next to an unchanged registered one, chains of
// updates across consecutive transactions of one batch (a backlog), and rows whose
// prior image comes from the baseline. Legal SQL: nothing may be quarantined and each
// projection must equal its live row.
func TestProtocolEdgeToastUnchanged(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE docs (id int8 PRIMARY KEY, owner text, body text, extra text, n int NOT NULL DEFAULT 0);
			ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN extra SET STORAGE EXTERNAL;
			INSERT INTO docs VALUES (1, 'a', repeat('b1', 2000), repeat('e1', 2000));
			SELECT synchro.register_table('docs', 'docs', ARRAY['id', 'owner', 'body', 'n']::name[]);
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		cols := []string{"id", "owner", "body", "n"}
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		live := []string{
			// Baseline row: prior image from the baseline.
			`UPDATE docs SET owner = 'b' WHERE id = 1`,
			// Insert and update in one transaction.
			`BEGIN; INSERT INTO docs VALUES (2, 'a', repeat('b2', 2000), repeat('e2', 2000)); UPDATE docs SET owner = 'c' WHERE id = 2;
			 UPDATE docs SET n = n + 1 WHERE id = 2; COMMIT`,
			// The unregistered out-of-line column changes, the registered one does not.
			`UPDATE docs SET extra = repeat('E2', 2000) WHERE id = 2`,
			// Delete and re-insert of the key with another body, then an update.
			`BEGIN; DELETE FROM docs WHERE id = 2; INSERT INTO docs VALUES (2, 'a', repeat('B2', 2100), NULL);
			 UPDATE docs SET owner = 'd' WHERE id = 2; COMMIT`,
			// An update that changes the body, then one that leaves it.
			`BEGIN; UPDATE docs SET body = repeat('x1', 2200) WHERE id = 1; UPDATE docs SET n = 5 WHERE id = 1; COMMIT`,
		}
		for _, sql := range live {
			mustExec(t, db, sql)
		}
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "docs", "docs", "id", cols))

		// A backlog: consecutive transactions in one batch, each leaving body unchanged.
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		backlog := []string{
			`INSERT INTO docs VALUES (3, 'a', repeat('b3', 2000), repeat('e3', 2000))`,
			`UPDATE docs SET owner = 'b' WHERE id = 3`,
			`UPDATE docs SET n = 1 WHERE id = 3`,
			`UPDATE docs SET extra = 'short' WHERE id = 3`,
			`UPDATE docs SET owner = 'z' WHERE id IN (1, 2, 3)`,
			`BEGIN; UPDATE docs SET body = repeat('y3', 2000) WHERE id = 3; UPDATE docs SET owner = 'q' WHERE id = 3; COMMIT`,
			`UPDATE docs SET n = n + 1`,
			`DELETE FROM docs WHERE id = 1`,
		}
		for _, sql := range backlog {
			mustExec(t, db, sql)
		}
		rr = startRunner(t, testRunnerConfig(t, db))
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "docs", "docs", "id", cols))
		require.NoError(t, rr.stop(t))
	})
}

// An out-of-line column that only a later registry generation registers (set_columns):
// after the projection bootstrap, an update that leaves it unchanged must keep its
// value in the row image.
func TestProtocolEdgeToastColumnRegisteredLater(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE docs (id int8 PRIMARY KEY, owner text, body text);
			ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
			SELECT synchro.register_table('docs', 'docs', ARRAY['id', 'owner']::name[]);
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO docs VALUES (1, 'a', repeat('b1', 2000)), (2, 'a', repeat('b2', 2000))`)
		require.Empty(t, protoSettle(t, db))
		rid := countOf(t, db, `SELECT relation_id::int FROM synchro.relation WHERE table_id = 'docs'`)
		mustExec(t, db, fmt.Sprintf(`SELECT synchro.set_columns(%d, ARRAY['id', 'owner', 'body']::name[]); SELECT synchro.activate_registry();`, rid))
		// Right after the activation, before the bootstrap may have merged, and later.
		mustExec(t, db, `UPDATE docs SET owner = 'b' WHERE id = 1`)
		eventually(t, 60*time.Second, "the projection bootstrap to merge", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE image ? 'body'`) == 2 ||
				len(quarantines(t, db)) > 0
		})
		mustExec(t, db, `UPDATE docs SET owner = 'c' WHERE id = 2`)
		mustExec(t, db, `UPDATE docs SET owner = 'd' WHERE id = 1`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "docs", "docs", "id", []string{"id", "owner", "body"}))
		require.NoError(t, rr.stop(t))
	})
}

// A registered column dropped and added again with the same name and type (legal
// DDL, one transaction): every existing row's value is gone (NULL) in the live table,
// with no row event in the WAL. The WAL's relation shape after it is identical by name
// and type, so neither materialization's drift check nor readiness (which compared
// names and types) saw anything: the projections kept the old values for ever, and
// readiness stayed ready (found by review). The registration now records each
// column's attribute number: readiness reports the drift (columns), and set_columns
// re-projects the relation (a projection bootstrap), after which the projection is the
// live rows again.
func TestRegisteredColumnDropReaddDetected(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner, note) VALUES (3, 'a', 'keep me')`)
	require.Empty(t, protoSettle(t, db))
	require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
	require.True(t, registryReady(t, db))

	mustExec(t, db, `ALTER TABLE items DROP COLUMN note; ALTER TABLE items ADD COLUMN note text`)
	mustExec(t, db, `INSERT INTO items (id, owner, note) VALUES (4, 'a', 'after')`)
	require.Empty(t, protoSettle(t, db))
	require.False(t, registryReady(t, db), "readiness reports the column dropped and added again")
	require.Contains(t, textOf(t, db, `SELECT detail FROM synchro.readiness() WHERE check_name = 'registry'`), "columns")

	// The remedy: register the columns again; the activation re-projects the relation.
	mustExec(t, db, `SELECT synchro.set_columns(relation_id, NULL) FROM synchro.relation WHERE table_id = 'items';
		SELECT synchro.activate_registry();`)
	waitBootstraps(t, db)
	require.Empty(t, protoSettle(t, db))
	require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil), "the projection is the live rows again")
	require.True(t, registryReady(t, db))
	require.NoError(t, rr.stop(t))
}

// A table with a column dropped before registration (a gap in attnums that pgoutput
// leaves out), then columns added after registration and activation: without a
// default, with a constant default (no rewrite: existing rows carry it as a missing
// attribute), with a volatile default (a rewrite, not decoded), inside a source
// transaction between two writes (the relation message is sent again mid-transaction),
// and an unregistered column dropped mid-stream. The new columns are not registered:
// nothing may be quarantined and the registered images must follow the live rows. Then
// one of them is registered (set_columns, a projection bootstrap) and written.
func TestProtocolEdgeColumnsAddedAndDropped(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE things (gone1 int, id int8 PRIMARY KEY, gone2 text, owner text, body text);
			ALTER TABLE things DROP COLUMN gone1, DROP COLUMN gone2;
			INSERT INTO things (id, owner, body) VALUES (1, 'a', 'one');
			SELECT synchro.register_table('things', 'things');
			SELECT synchro.add_scope_rule('things', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		cols := []string{"id", "owner", "body"}
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		for _, sql := range []string{
			`INSERT INTO things (id, owner, body) VALUES (2, 'a', 'two')`,
			`ALTER TABLE things ADD COLUMN plain int`,
			`UPDATE things SET body = 'one+' WHERE id = 1`,
			`ALTER TABLE things ADD COLUMN withdef int NOT NULL DEFAULT 7`,
			`UPDATE things SET owner = 'b' WHERE id = 2`,
			`DELETE FROM things WHERE id = 1`,
			`ALTER TABLE things ADD COLUMN stamp timestamptz NOT NULL DEFAULT clock_timestamp()`,
			`INSERT INTO things (id, owner, body) VALUES (3, 'a', 'three')`,
			`BEGIN; UPDATE things SET body = 'two+' WHERE id = 2; ALTER TABLE things ADD COLUMN mid text DEFAULT 'm';
			 UPDATE things SET body = 'two++', mid = 'x' WHERE id = 2; INSERT INTO things (id, owner, body) VALUES (4, 'c', 'four'); COMMIT`,
			`ALTER TABLE things DROP COLUMN plain`,
			`UPDATE things SET owner = 'd' WHERE id = 3`,
			`BEGIN; ALTER TABLE things DROP COLUMN mid; UPDATE things SET body = 'four+' WHERE id = 4; COMMIT`,
		} {
			mustExec(t, db, sql)
		}
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "things", "things", "id", cols))

		// The same as a backlog over a restart: several shapes of the relation in one
		// batch, and the new session's first relation messages.
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		for _, sql := range []string{
			`UPDATE things SET body = 'three+' WHERE id = 3`,
			`ALTER TABLE things ADD COLUMN late1 text`,
			`UPDATE things SET body = 'four++', late1 = 'l' WHERE id = 4`,
			`BEGIN; INSERT INTO things (id, owner, body) VALUES (5, 'a', 'five'); ALTER TABLE things ADD COLUMN late2 int DEFAULT 2;
			 UPDATE things SET owner = 'b' WHERE id = 5; ALTER TABLE things DROP COLUMN late1; UPDATE things SET body = 'five+' WHERE id = 5; COMMIT`,
			`ALTER TABLE things ALTER COLUMN late2 TYPE bigint`,
			`UPDATE things SET body = 'two+++' WHERE id = 2`,
			`DELETE FROM things WHERE id = 5`,
		} {
			mustExec(t, db, sql)
		}
		rr = startRunner(t, testRunnerConfig(t, db))
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "things", "things", "id", cols))

		// Register the added column with the constant default.
		rid := countOf(t, db, `SELECT relation_id::int FROM synchro.relation WHERE table_id = 'things'`)
		mustExec(t, db, fmt.Sprintf(`SELECT synchro.set_columns(%d, ARRAY['id', 'owner', 'body', 'withdef']::name[]); SELECT synchro.activate_registry();`, rid))
		mustExec(t, db, `UPDATE things SET withdef = 8 WHERE id = 4`)
		eventually(t, 60*time.Second, "the projection bootstrap to merge", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE image ? 'withdef'`) == 3 ||
				len(quarantines(t, db)) > 0
		})
		mustExec(t, db, `UPDATE things SET owner = 'e' WHERE id = 2`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "things", "things", "id", []string{"id", "owner", "body", "withdef"}))
		require.NoError(t, rr.stop(t))
	})
}

// The widest table PostgreSQL allows: 1,600 columns, every one registered, some NULL.
func TestProtocolEdgeWideTable(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		var ddl strings.Builder
		ddl.WriteString(`CREATE TABLE wide (id int8 PRIMARY KEY, owner text`)
		for i := 3; i <= 1600; i++ {
			fmt.Fprintf(&ddl, ", c%d int2", i)
		}
		ddl.WriteString(`)`)
		mustExec(t, db, ddl.String())
		mustExec(t, db, `
			INSERT INTO wide (id, owner, c3, c1600) VALUES (1, 'a', 3, 1600);
			SELECT synchro.register_table('wide', 'wide');
			SELECT synchro.add_scope_rule('wide', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		var set strings.Builder
		for i := 3; i <= 1600; i += 2 {
			if set.Len() > 0 {
				set.WriteString(", ")
			}
			fmt.Fprintf(&set, "c%d = %d", i, i%30000)
		}
		mustExec(t, db, `INSERT INTO wide (id, owner, c5, c999) VALUES (2, 'a', 5, 999)`)
		mustExec(t, db, `UPDATE wide SET `+set.String()+` WHERE id = 1`)
		mustExec(t, db, `UPDATE wide SET owner = 'b', c4 = 4 WHERE id = 2`)
		mustExec(t, db, `INSERT INTO wide (id, owner) VALUES (3, 'c'); DELETE FROM wide WHERE id = 3`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "wide", "wide", "id", nil))
		require.Equal(t, 1600, countOf(t, db, `SELECT count(*)::int FROM synchro.projection p, jsonb_object_keys(p.image) WHERE p.pk = '1'`))
		require.NoError(t, rr.stop(t))
	})
}

// TRUNCATE of several tables in one statement, a registered one among them, and a
// TRUNCATE ... CASCADE of an unregistered table that reaches a registered one through a
// foreign key: refused at the source (0A000), nothing truncated. TRUNCATE of
// unregistered tables only is not the stream's business: it never blocks it.
func TestProtocolEdgeTruncateGuards(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE parent (id int8 PRIMARY KEY);
			CREATE TABLE loose (id int8 PRIMARY KEY, v text);
			CREATE TABLE items (id int8 PRIMARY KEY, owner text, parent_id int8 REFERENCES parent(id));
			INSERT INTO parent VALUES (1), (2);
			INSERT INTO loose VALUES (1, 'x');
			INSERT INTO items VALUES (1, 'a', 1), (2, 'b', NULL);
			SELECT synchro.register_table('items', 'items');
			SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		ctx := context.Background()
		_, err := db.Pool.Exec(ctx, `TRUNCATE loose, items`)
		requireSQLState(t, err, "0A000")
		_, err = db.Pool.Exec(ctx, `TRUNCATE parent CASCADE`)
		requireSQLState(t, err, "0A000")
		require.Equal(t, 2, countOf(t, db, `SELECT count(*)::int FROM items`))
		require.Equal(t, 2, countOf(t, db, `SELECT count(*)::int FROM parent`))
		mustExec(t, db, `TRUNCATE loose`)
		mustExec(t, db, `INSERT INTO loose VALUES (2, 'y'); TRUNCATE loose RESTART IDENTITY; INSERT INTO items VALUES (3, 'a', 2)`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// Qualified identity with hostile names: a registered table in a schema with a dot,
// uppercase and non-ASCII letters, named with a comma, a space and an asterisk; an
// unregistered table of the same name in public and one in a schema that differs only
// in case. Only the registered one is captured, under both decoders.
func TestProtocolEdgeQuotedNames(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE SCHEMA "Ünï Sch.ema";
			CREATE SCHEMA "ünï sch.ema";
			CREATE TABLE "Ünï Sch.ema"."Things, Inc *" (id text PRIMARY KEY, "Owner" text, "Body Ü" text);
			CREATE TABLE public."Things, Inc *" (id text PRIMARY KEY, "Owner" text, "Body Ü" text);
			CREATE TABLE "ünï sch.ema"."Things, Inc *" (id text PRIMARY KEY, "Owner" text, "Body Ü" text);
			INSERT INTO "Ünï Sch.ema"."Things, Inc *" VALUES ('k0', 'a', 'zero');
			SELECT synchro.register_table('"Ünï Sch.ema"."Things, Inc *"', 'things');
			SELECT synchro.add_scope_rule('things', 'owner:', 'Owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		for _, sql := range []string{
			`INSERT INTO public."Things, Inc *" VALUES ('k1', 'a', 'public')`,
			`INSERT INTO "Ünï Sch.ema"."Things, Inc *" VALUES ('k1', 'a', 'registered'), ('Ü k2', 'b', 'two')`,
			`INSERT INTO "ünï sch.ema"."Things, Inc *" VALUES ('k1', 'a', 'lower')`,
			`BEGIN; UPDATE public."Things, Inc *" SET "Owner" = 'z'; UPDATE "Ünï Sch.ema"."Things, Inc *" SET "Body Ü" = 'both' WHERE id = 'k1';
			 DELETE FROM "ünï sch.ema"."Things, Inc *"; COMMIT`,
			`DELETE FROM "Ünï Sch.ema"."Things, Inc *" WHERE id = 'k0'`,
		} {
			mustExec(t, db, sql)
		}
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, `"Ünï Sch.ema"."Things, Inc *"`, "things", "id", nil))
		require.Equal(t, 0, countOf(t, db, `SELECT count(*)::int FROM synchro.effect WHERE image ->> 'Body Ü' IN ('public', 'lower')`))
		require.Equal(t, 0, countOf(t, db, `SELECT count(*)::int FROM synchro.effect WHERE scope = 'owner:z'`))
		require.NoError(t, rr.stop(t))
	})
}

// Registered columns of user-defined types: an enum, an array of it, a domain over an
// enum array, a domain over int with a CHECK, an array of that domain, a domain over
// text. pgoutput sends Type messages for them; an enum value added mid-stream (the
// type's relation message is sent again) is used right away.
func TestProtocolEdgeUserDefinedTypes(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE SCHEMA "App Types";
			CREATE TYPE "App Types"."Mood" AS ENUM ('sad', 'ok', 'it''s, "fine"');
			CREATE DOMAIN posint AS int CHECK (VALUE > 0);
			CREATE DOMAIN shorttext AS text CHECK (length(VALUE) < 100);
			CREATE DOMAIN moods AS "App Types"."Mood"[];
			CREATE TABLE typed (id int8 PRIMARY KEY, owner text, m "App Types"."Mood", ms "App Types"."Mood"[],
			                    md moods, p posint, ps posint[], s shorttext, j jsonb, tz timestamptz, iv interval);
			INSERT INTO typed VALUES (1, 'a', 'sad', '{sad,ok}', '{ok}', 1, '{1,2}', 's', '{"a":[1,"b"]}', '2020-01-01 00:00+05', '1 day -01:02:03');
			SELECT synchro.register_table('typed', 'typed');
			SELECT synchro.add_scope_rule('typed', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO typed VALUES (2, 'a', 'it''s, "fine"', ARRAY['it''s, "fine"', NULL, 'ok']::"App Types"."Mood"[],
			'{{sad,ok},{ok,sad}}', 2, '[0:1]={3,4}', 'two', 'null', 'infinity', '-3 mons 2 days')`)
		mustExec(t, db, `ALTER TYPE "App Types"."Mood" ADD VALUE 'new one' BEFORE 'sad'`)
		mustExec(t, db, `INSERT INTO typed (id, owner, m, md) VALUES (3, 'b', 'new one', '{"new one"}')`)
		mustExec(t, db, `UPDATE typed SET ms = array_append(ms, 'new one'), p = 9 WHERE id = 1`)
		mustExec(t, db, `ALTER DOMAIN shorttext ADD CONSTRAINT small CHECK (length(VALUE) < 50)`)
		mustExec(t, db, `UPDATE typed SET owner = 'c' WHERE id = 2`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "typed", "typed", "id", nil))

		// A backlog materialized by a new session.
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		mustExec(t, db, `INSERT INTO typed (id, owner, m, ps) VALUES (4, 'a', 'ok', '{5}')`)
		mustExec(t, db, `ALTER TYPE "App Types"."Mood" ADD VALUE 'later'`)
		mustExec(t, db, `UPDATE typed SET m = 'later' WHERE id = 4`)
		rr = startRunner(t, testRunnerConfig(t, db))
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "typed", "typed", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// Transactions the stream must pass without blocking: one that carries only a
// stranger's logical message, only synchro.-prefixed garbage, non-transactional
// messages (inside a transaction that aborts and one that commits), fences emitted in
// subtransactions that roll back (a savepoint, a PL/pgSQL exception block, nested
// savepoints) with the same row changed again afterwards, and a forged activation in a
// rolled-back subtransaction.
func TestProtocolEdgeMessagesAndSubtransactions(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		ctx := context.Background()
		for _, sql := range []string{
			`SELECT pg_logical_emit_message(true, 'someone.else', 'hello')`,
			`SELECT pg_logical_emit_message(true, 'synchro.fence', 'garbage')`,
			`SELECT pg_logical_emit_message(false, 'synchro.fence', 'nontx'); SELECT pg_logical_emit_message(false, 'x', 'y')`,
			`BEGIN; INSERT INTO items (id, owner) VALUES (10, 'a'); SELECT pg_logical_emit_message(false, 'synchro.registry', '{}');
			 SAVEPOINT s; UPDATE items SET owner = 'b' WHERE id = 10; ROLLBACK TO SAVEPOINT s; UPDATE items SET v = 7 WHERE id = 10; COMMIT`,
			`BEGIN; UPDATE items SET v = 1 WHERE id = 1; SAVEPOINT a; UPDATE items SET v = 2 WHERE id = 1; SAVEPOINT b;
			 DELETE FROM items WHERE id = 1; INSERT INTO items (id, owner) VALUES (1, 'z'); RELEASE SAVEPOINT b;
			 SELECT pg_logical_emit_message(true, 'synchro.registry', '{"v":2,"generation":99,"previous":1,"mac":"00000000000000000000000000000000"}');
			 ROLLBACK TO SAVEPOINT a; UPDATE items SET owner = 'c' WHERE id = 1; COMMIT`,
			`DO $$ BEGIN
			   INSERT INTO items (id, owner) VALUES (11, 'a');
			   BEGIN
			     UPDATE items SET owner = 'q' WHERE id = 11;
			     INSERT INTO items (id, owner) VALUES (12, 'q');
			     RAISE EXCEPTION 'undo';
			   EXCEPTION WHEN raise_exception THEN NULL;
			   END;
			   INSERT INTO items (id, owner) VALUES (12, 'r');
			 END $$`,
			`BEGIN; SAVEPOINT s; INSERT INTO items (id, owner) VALUES (13, 'a'); ROLLBACK TO SAVEPOINT s; SELECT pg_logical_emit_message(true, 'p', 'only'); COMMIT`,
		} {
			mustExec(t, db, sql)
		}
		// A transaction that aborts after a non-transactional message.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO items (id, owner) VALUES (14, 'a'); SELECT pg_logical_emit_message(false, 'synchro.fence', 'x')`)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (15, 'a')`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		waitAcked(t, db)
		require.NoError(t, rr.stop(t))
	})
}

// A source that is itself a logical replication subscriber: its transactions carry a
// replication origin, and pgoutput sends an Origin message after Begin.
func TestProtocolEdgeReplicationOrigin(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		ctx := context.Background()
		origin := "review_" + runnerSlot(db)
		if len(origin) > 60 {
			origin = origin[:60]
		}
		mustExec(t, db, `SELECT pg_replication_origin_create($1)`, origin)
		t.Cleanup(func() { _, _ = db.Pool.Exec(context.Background(), `SELECT pg_replication_origin_drop($1)`, origin) })
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT pg_replication_origin_session_setup($1)`, origin)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `BEGIN; SELECT pg_replication_origin_xact_setup('0/1000', now());
			INSERT INTO items (id, owner) VALUES (20, 'a'); UPDATE items SET owner = 'b' WHERE id = 1; COMMIT`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `INSERT INTO items (id, owner) VALUES (21, 'a')`)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SELECT pg_replication_origin_session_reset()`)
		require.NoError(t, err)
		conn.Release()
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (22, 'a')`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// A large transaction spilled to disk by the walsender (logical_decoding_work_mem at
// its minimum for the test database's sessions), with out-of-line values, aborted
// subtransactions whose fences the reorder buffer must drop, and a key changed several
// times. Materialized once, whole.
func TestProtocolEdgeSpilledTransaction(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL`)
	mustExec(t, db, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '64kB'`, pgx.Identifier{db.Name}.Sanitize()))
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	const n = 20000
	mustExec(t, db, strings.ReplaceAll(`BEGIN;
		INSERT INTO items (id, owner, note) SELECT g, 'o' || (g % 3), CASE WHEN g % 100 = 0 THEN repeat(md5(g::text), 100) END FROM generate_series(100, 99 + $1::int / 2) g;
		SAVEPOINT a;
		UPDATE items SET owner = 'gone' WHERE id BETWEEN 100 AND 2099;
		ROLLBACK TO SAVEPOINT a;
		UPDATE items SET v = v + 1 WHERE id % 100 = 0;
		SAVEPOINT b;
		INSERT INTO items (id, owner) SELECT g, 'gone' FROM generate_series(1000000, 1002000) g;
		RELEASE SAVEPOINT b;
		DELETE FROM items WHERE id >= 1000000;
		INSERT INTO items (id, owner, note) SELECT g, 'p' || (g % 3), repeat('y', 50) FROM generate_series(100 + $1::int / 2, 99 + $1::int) g;
		UPDATE items SET owner = 'o9' WHERE id = 100;
		UPDATE items SET owner = 'o8' WHERE id = 100;
		COMMIT`, "$1", fmt.Sprint(n)))
	q := protoSettle(t, db)
	require.Empty(t, q, "nothing quarantined")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*)::int FROM synchro.txn WHERE event_count > 0`))
	require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
	var spilled int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(sum(spill_txns), 0) FROM pg_stat_replication_slots WHERE slot_name = $1`, runnerSlot(db)).Scan(&spilled))
	t.Logf("spilled transactions: %d", spilled)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
}

// protoTerminate terminates the runner's sessions of this database whose
// application_name is app, and returns how many it terminated.
func protoTerminate(t *testing.T, db *testdb.DB, app string) int {
	t.Helper()
	return countOf(t, db, `SELECT count(*)::int FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1) x`, app)
}

// The runner loses its sessions while a large transaction is in hand: the walsender is
// terminated while the apply session waits inside the materialization of that
// transaction (held by a lock), then the apply session itself. The transaction is
// materialized exactly once (one ledger row, one effect per row), nothing is
// quarantined, and the slot ends at the processed boundary.
func TestProtocolEdgeSessionsKilledMidTransaction(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
		require.Empty(t, protoSettle(t, db))
		before := countOf(t, db, `SELECT count(*)::int FROM synchro.txn`)

		held, release := holdMaterialization(t, db)
		const n = 5000
		mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'o' || (g % 3), repeat('z', 50) FROM generate_series(100, 99 + $1::int) g`, n)
		mustExec(t, db, `UPDATE items SET v = 9 WHERE id = 3`)
		held()
		require.Positive(t, protoTerminate(t, db, "synchro-runner-replication"), "the walsender was terminated")
		// The apply session that waits in the lock: terminated too (its batch rolls back).
		require.Positive(t, protoTerminate(t, db, "synchro-runner-apply"), "the apply sessions were terminated")
		release()
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Equal(t, before+2, countOf(t, db, `SELECT count(*)::int FROM synchro.txn`), "each transaction once")
		require.Equal(t, n, countOf(t, db, `SELECT count(*)::int FROM synchro.effect WHERE pk::bigint >= 100`))
		require.Equal(t, n, countOf(t, db, `SELECT count(DISTINCT (commit_lsn, event_ordinal))::int FROM synchro.effect WHERE pk::bigint >= 100`))
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		waitAcked(t, db)
		require.NoError(t, rr.stop(t))
	})
}

// A key stored out of line (long text key, REPLICA IDENTITY DEFAULT) with a registered
// out-of-line column: updates that leave both unchanged, that change only the other
// one, and a delete (the old key image) - live and as a backlog.
func TestProtocolEdgeToastedKeyAndColumn(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE docs (id text PRIMARY KEY, owner text, body text, c text, d text, n int NOT NULL DEFAULT 0);
			ALTER TABLE docs ALTER COLUMN id SET STORAGE EXTERNAL, ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN c SET STORAGE EXTERNAL;
			SELECT synchro.register_table('docs', 'docs');
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		k1, k2, k3 := strings.Repeat("k1", 510), strings.Repeat("k2", 510), strings.Repeat("k3", 510)
		run := func(sqls ...string) {
			for _, s := range sqls {
				mustExec(t, db, strings.NewReplacer("K1", k1, "K2", k2, "K3", k3).Replace(s))
			}
		}
		run(`INSERT INTO docs VALUES ('K1', 'a', repeat('b', 1010), repeat('x', 1005), repeat('y', 300)),
			('K2', 'a', repeat('c', 1010), repeat('x', 1005), repeat('y', 300)), ('K3', 'b', NULL, repeat('x', 1005), repeat('y', 900))`)
		// K1's and K2's keys and bodies, K3's key: five values out of line.
		require.Equal(t, 5, countOf(t, db, `SELECT count(DISTINCT chunk_id)::int FROM `+toastTable(t, db, "docs")),
			"keys and bodies are stored out of line")
		run(
			`UPDATE docs SET owner = 'b' WHERE id = 'K1'`,
			`UPDATE docs SET body = repeat('d', 1010) WHERE id = 'K2'`,
			`BEGIN; UPDATE docs SET n = 1 WHERE id = 'K2'; DELETE FROM docs WHERE id = 'K2'; COMMIT`)
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "docs", "docs", "id", nil))

		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		run(`UPDATE docs SET n = n + 1`,
			`INSERT INTO docs VALUES ('K2', 'c', repeat('e', 1010), repeat('x', 1005), repeat('y', 300))`,
			`UPDATE docs SET owner = 'z' WHERE id = 'K2'`,
			`BEGIN; UPDATE docs SET body = repeat('f', 1010) WHERE id = 'K3'; UPDATE docs SET owner = 'y' WHERE id = 'K3'; COMMIT`,
			`DELETE FROM docs WHERE id = 'K1'`)
		rr = startRunner(t, testRunnerConfig(t, db))
		require.Empty(t, protoSettle(t, db), "nothing quarantined")
		require.Empty(t, protoDiverged(t, db, "docs", "docs", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

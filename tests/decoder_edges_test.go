package tests

// From the second independent review of the two decoders (pgoutput, wal2json 2.5) and
// of the rule that both materialize the same source writes byte for byte
// (docs/decoders.md: "the same WAL materializes to the same synchro tables"; "it
// materializes exactly the same, within the differences below"), 2026-12-04. The tests
// marked "Was a bug" were red until fixed; two findings are documented differences
// (replica identity, a table dropped while the runner is behind); the others pin
// scenarios that were checked and hold.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/wal2json"
	"github.com/synchro/synchro/tests/testdb"
)

// decoderDifferential2 is runDecoderDifferential's two materialized states.
func decoderDifferential2(t *testing.T, schema string, workload []string, checkLive ...[3]string) (viaPgoutput, viaWal2json map[string][]string) {
	t.Helper()
	d := runDecoderDifferential(t, schema, workload, checkLive...)
	return d.viaPgoutput, d.viaWal2json
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): wal2json 2.5 prints a column's type OID with "%d" (wal2json.c,
// pg_decode_write_tuple: appendStringInfo(ctx->out, "%d", attr->atttypid)), so the
// type OID of every type created after the cluster's OID counter passed 2^31 (an enum,
// a domain such as the exact_numeric docs/decoders.md recommends, any array of them)
// arrives as a negative JSON number. The decoder reads typeoid as a uint32 (fast path:
// scanner.uint32 refuses '-'; strict path: encoding/json refuses a negative number for a
// uint32), so every change of a table with such a column is decode_malformed: a
// blocking poison for a transaction PostgreSQL accepted and pgoutput (binary uint32
// OIDs) materializes. Breaks "both decoders give the same neutral messages, and the
// same WAL materializes to the same synchro tables" (docs/decoders.md) and ADR 001's
// poison only for what cannot be decoded. The OID counter is cluster-wide and also
// feeds TOAST value ids, so long-lived clusters pass 2^31. Fix: read typeoid as an
// int64 and take it modulo 2^32 (int32 -> uint32), in parseFast (scanner.uint32) and in
// wireColumn/wirePK for the strict path.
// ---------------------------------------------------------------------------------
func TestDecoderEdgeWal2jsonTypeOIDAbove2to31(t *testing.T) {
	t.Parallel()
	moodOID := uint32(3000000000) // a user enum created past OID 2^31
	printed := int32(moodOID)     // what wal2json's "%d" prints: -1294967296
	require.Less(t, printed, int32(0))
	tb := wal2json.Table{
		Relation: decode.Relation{OID: 16500, Namespace: "public", Name: "moods", ReplicaIdentity: 'd',
			Columns: []decode.Column{
				{Name: "id", TypeOID: 20, TypeMod: -1, Key: true},
				{Name: "m", TypeOID: moodOID, TypeMod: -1},
			}},
		TypLens:         []int32{8, 4},
		FirstGeneration: 1,
	}
	s, err := wal2json.NewSession([]wal2json.Table{tb}, decode.SessionSpec{RegistryGeneration: 1,
		Authentic: func(*decode.Activation) bool { return true }}, 1)
	require.NoError(t, err)
	ts := `"timestamp":"2026-12-05 10:00:00.5+00"`
	docs := []string{
		`{"action":"B","xid":900,` + ts + `,"lsn":"0/16000100","nextlsn":"0/16000130"}`,
		fmt.Sprintf(`{"action":"I","xid":900,`+ts+`,"lsn":"0/16000050","schema":"public","table":"moods",`+
			`"columns":[{"name":"id","typeoid":20,"value":1},{"name":"m","typeoid":%d,"value":"happy"}],`+
			`"pk":[{"name":"id","typeoid":20}]}`, printed),
		`{"action":"C","xid":900,` + ts + `,"lsn":"0/16000100","nextlsn":"0/16000130"}`,
	}
	var rows []*decode.Row
	for i, d := range docs {
		msgs, err := s.Decode(pglogrepl.LSN(0x16000000+i), []byte(d))
		require.NoError(t, err, "document %d as wal2json 2.5 prints it for a type OID above 2^31: a valid "+
			"insert must not be decode_malformed (pgoutput carries the same OID as a uint32)", i)
		for _, m := range msgs {
			if r, ok := m.(*decode.Row); ok {
				rows = append(rows, r)
			}
		}
	}
	require.Len(t, rows, 1)
	require.Equal(t, moodOID, rows[0].Relation.Columns[1].TypeOID, "the same relation shape pgoutput would send")
	require.Equal(t, "happy", string(rows[0].New.Values[1].Data))
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): a relation unregistered by a later activated generation
// (synchro.unregister_relation) stays in wal2json's table set for ever:
// synchro.runner_table_set() returns every relation registered in ANY activated
// generation (retired ones included) and the session's published() only checks the
// first generation that registered it, never that a later one removed it. pgoutput's
// publication drops the table at activation, so its later writes (no fence triggers any
// more: the table is the application's own again) never reach the runner. Under
// wal2json they are decoded as row events without fences and the stream is
// quarantined (unknown_relation; a TRUNCATE of the table, allowed again, would be a
// truncate poison). Breaks: TestUnregisterTable's rule "later writes to it emit nothing and
// block nothing" (pgoutput only there), the decoders' byte-identical materialization,
// and "a value PostgreSQL accepted never stops the stream". Fix: runner_table_set must
// give each relation the generation range that registers it (first and, if removed,
// the generation that removed it), and published() must gate on both (or leave a
// relation no longer registered in the latest generation out of add-tables once the
// session is past its removal).
// ---------------------------------------------------------------------------------
func TestDecoderEdgeUnregisteredTableWritesBlockNothing(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE items (id int8 PRIMARY KEY, owner text);
			CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
			SELECT synchro.register_table('items', 'items');
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
			SELECT synchro.activate_registry();
			INSERT INTO notes VALUES ('n1', 'a', 'first');`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		write(t, db, `INSERT INTO items VALUES (1, 'a')`)
		op := newOperator(t, db)
		require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, relationID(t, db, "notes")))
		g := op.activate(t)
		waitRegistry(t, db, g)

		// notes is the application's own table again: writes to it are not the stream's.
		mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'a', 'unsynced'); UPDATE notes SET body = 'x'`)
		mustExec(t, db, `DELETE FROM notes WHERE id = 'n1'`)
		mustExec(t, db, `TRUNCATE notes`) // its truncate guard went with its registration
		mustExec(t, db, `INSERT INTO items VALUES (2, 'a')`)
		require.Empty(t, protoSettle(t, db), "writes to an unregistered table quarantine nothing")
		require.Equal(t, 2, countOf(t, db, `SELECT count(*)::int FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'items'`))
		require.NoError(t, rr.stop(t))
	})
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): the wal2json float/numeric refusal looks at every column registered in
// ANY activated generation (runner_table_set unions them), not at the registry in
// effect. An operator who follows the refusal's advice ("Register the table without
// that column", docs/decoders.md "What is checked at start") through set_columns, or
// who unregisters the table, is refused for ever: no activation can take a float4,
// float8 or numeric column out of the union, so the only way to wal2json is a new
// database. The same holds for a pgoutput stream switched to wal2json by a stream
// reset after the column was removed. Fix: check only the columns of the generations
// the session can still decode (the latest activated one, and older ones only while
// WAL of theirs is ahead of the stream's acknowledgement).
// ---------------------------------------------------------------------------------
func TestDecoderEdgeWal2jsonNumericRemovedBySetColumns(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE prices (id int8 PRIMARY KEY, owner text, price float8);
		GRANT SELECT ON prices TO synchro_operator;
		SELECT synchro.register_table('prices', 'prices');
		SELECT synchro.add_scope_rule('prices', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	err, _ := fatalRunner(t, cfg)
	c, _ := decode.ClassOf(err)
	require.Equal(t, decode.ClassValueNotRepresentable, c, "%v", err)

	// The advice followed: the column is no longer registered in the registry in effect.
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['owner']::name[])`, relationID(t, db, "prices")))
	op.activate(t)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*)::int FROM synchro.registry WHERE 'price' = ANY (columns::text[])`),
		"price is not registered any more")

	cfg = testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	rr := startRunner(t, cfg)
	waitStreamOrExit(t, db, rr, "wal2json runner refused a registry without a float column")
	mustExec(t, db, `INSERT INTO prices VALUES (1, 'a', 'NaN')`)
	waitEffects(t, db, 1)
}

// The other side of the fix above: a float column that only an earlier generation
// registers is still refused where it matters. A wal2json stream whose acknowledged
// position lies before a generation that registered a float8 column (set_columns added
// it, a row with NaN was written, set_columns took it out again, all while the runner
// was stopped) stops with value_not_representable (fatal) at that row, which wal2json
// 2.5 would carry as null: never a silent null in place of NaN.
func TestDecoderEdgeWal2jsonNumericInOlderGenerationRefusedAtRow(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE prices (id int8 PRIMARY KEY, owner text, price float8);
		GRANT SELECT ON prices TO synchro_operator;
		SELECT synchro.register_table('prices', 'prices', ARRAY['owner']::name[]);
		SELECT synchro.add_scope_rule('prices', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	op := newOperator(t, db)
	rel := relationID(t, db, "prices")
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['owner', 'price']::name[])`, rel))
	op.activate(t)
	mustExec(t, db, `INSERT INTO prices VALUES (1, 'a', 'NaN')`)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['owner']::name[])`, rel))
	op.activate(t)

	err, _ := fatalRunner(t, cfg)
	c, _ := decode.ClassOf(err)
	require.Equal(t, decode.ClassValueNotRepresentable, c, "%v", err)
	require.Zero(t, countOf(t, db, `SELECT count(*)::int FROM synchro.projection`), "nothing materialized in its place")
}

// Checked and sound: json values PostgreSQL's json type accepts but jsonb cannot hold
// (a \u0000 escape, a lone surrogate, a number past numeric's range), in a json column,
// a json[] and a domain over json, are refused at the source (class 22), so they never
// reach either decoder; a json number at numeric's smallest scale is accepted and
// materializes under both (TestDecoderEdgeValuesDifferential carries 1e400).
func TestDecoderEdgeJSONRefusedAtSource(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `CREATE DOMAIN dj AS json; CREATE TABLE jt (id int8 PRIMARY KEY, owner text, j json, ja json[], d dj);
		SELECT synchro.register_table('jt', 'jt');
		SELECT synchro.activate_registry();`)
	for _, c := range []struct{ sql, code string }{
		{`INSERT INTO jt (id, j) VALUES (1, '[1e1000000]')`, "22003"},
		{`INSERT INTO jt (id, ja) VALUES (2, ARRAY['[1e131072]']::json[])`, "22003"},
		{`INSERT INTO jt (id, d) VALUES (3, '[1e-16384]')`, "22003"},
		{`INSERT INTO jt (id, j) VALUES (4, '"\ud800"')`, "22P02"},
		{`INSERT INTO jt (id, j) VALUES (5, '{"a": "\u0000"}')`, "22P05"},
	} {
		_, err := db.Pool.Exec(context.Background(), c.sql)
		requireSQLState(t, err, c.code)
	}
	mustExec(t, db, `INSERT INTO jt (id, j) VALUES (6, '[1e-16383, -0]')`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*)::int FROM jt`))
}

// review2ValuesSchema: registered columns of every value kind whose text or
// precision could differ between the decoders, in a table with a column dropped before
// registration, a generated column (never registered: wal2json 2.5 sends it, pgoutput
// does not), column names that need quoting, a text key with hostile characters, and
// five more tables written together in one transaction.
const review2ValuesSchema = `
	CREATE TYPE mood AS ENUM ('ok', 'it''s "x"', 'ü');
	CREATE DOMAIN dfloat AS float8;
	CREATE DOMAIN dnum AS numeric;
	CREATE DOMAIN dreal AS float4;
	CREATE SCHEMA "Sch ""q"".x";
	CREATE TABLE vals (id int8 PRIMARY KEY, owner text, gone text,
	  m money, b5 bit(5), vb varbit(20), by bytea, bybig bytea,
	  j json, jb jsonb, jbig jsonb, t text, tbig text,
	  f8s float8[], f4s float4[], ns numeric[], df dfloat, dr dreal, dn dnum, dfs dfloat[],
	  ts timestamp, tz timestamptz, d date, tt timetz, iv interval,
	  r tstzrange, mr int4multirange, nr numrange,
	  ia int4[], ta text[], en mood, ens mood[],
	  ip inet, cn cidr, mac macaddr, tv tsvector, xm xml, lsn pg_lsn, o oid, c1 "char", nm name, ch char(5),
	  i2 int2, i8 int8, bo bool, u uuid,
	  "Wëird ""col""" text, "a.b,c" int4, "with space" bool,
	  g int8 GENERATED ALWAYS AS (i8 / 2) STORED);
	ALTER TABLE vals DROP COLUMN gone;
	ALTER TABLE vals ALTER bybig SET STORAGE EXTERNAL, ALTER jbig SET STORAGE EXTERNAL, ALTER tbig SET STORAGE EXTERNAL;
	CREATE TABLE "Sch ""q"".x"."T,1 *" ("Kéy ""q""" text PRIMARY KEY, owner text, n int4);
	CREATE TABLE m1 (id int4 PRIMARY KEY, owner text, v text);
	CREATE TABLE m2 (id int8 PRIMARY KEY, owner text, v jsonb);
	CREATE TABLE m3 (id uuid PRIMARY KEY, owner text, v bytea);
	CREATE TABLE m4 (id varchar(10) PRIMARY KEY, owner text, v int2[]);
	SELECT synchro.register_table('vals', 'vals');
	SELECT synchro.register_table('"Sch ""q"".x"."T,1 *"', 'tk');
	SELECT synchro.register_table('m1', 'm1');
	SELECT synchro.register_table('m2', 'm2');
	SELECT synchro.register_table('m3', 'm3');
	SELECT synchro.register_table('m4', 'm4');
	SELECT synchro.add_scope_rule('vals', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('tk', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('m1', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('m2', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('m3', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('m4', 'owner:', 'owner');
	SELECT synchro.activate_registry();
	INSERT INTO vals (id, owner, df, dn, f8s, ns) VALUES (1, 'a', 'NaN', 'Infinity', '{NaN,-Infinity}', '{NaN,Infinity}');`

var review2ValuesWorkload = []string{
	// Edge values of every kind.
	`INSERT INTO vals VALUES (2, 'a',
	   '$1,234,567.89', B'10101', B'1', '\x', decode(repeat('00ff', 20000), 'hex'),
	   '{"k": 1, "k": 2,   "u": "\u00e9\ud83d\ude00\n\\u0041", "n": 1e400, "s": 12345678901234567890.5e-3}',
	   '{"a": -0, "b": 1.0e-5, "c": "\u0001"}',
	   (SELECT jsonb_agg(i) FROM generate_series(1, 5000) i),
	   E'ctl \x01\x1f\x7f U+2028 \u2028 bs \\ \\u0041 q " nl\n cr\r tab\t', repeat('ü€', 20000),
	   '{NaN,Infinity,-Infinity,-0,1e-310,1.7976931348623157e308,4.9e-324}', '{NaN,-Infinity,1.17549e-38,1e-45,-0}',
	   '{NaN,Infinity,-Infinity,-0.000,1e-1000,9e131000}',
	   '-0', '1e-45', '1e-16383', '{NaN,Infinity,-0,2.2250738585072014e-308}',
	   'infinity', '0044-03-15 12:00:00.000001+05:30 BC', '-infinity', '23:59:59.999999-14:59', '-178000000 years 1 mon -2 days 03:04:05.678901',
	   '[-infinity,"2020-01-01 00:00+00")', '{[1,3),[5,7),(,0)}', '(-Infinity,Infinity]',
	   '[0:1][-1:0]={{1,NULL},{3,4}}', '{"NULL",NULL,"a\"b\\c",""}', 'it''s "x"', '{ü,NULL,"it''s \"x\""}',
	   '::ffff:1.2.3.4/128', '10.0.0.0/8', '08:00:2b:01:02:03', 'a:1A b''c'':2', '<a x="1">é &amp; b</a>', 'FFFFFFFF/FFFFFFFF',
	   4294967295, E'\\001', 'näme', 'ab',
	   -32768, -9223372036854775808, false, '00000000-0000-0000-0000-000000000000',
	   E'v\n"', -1, true)`,
	// Bounds the differential fixture does not have, and NULLs.
	`INSERT INTO vals (id, owner, m, f8s, df, dr, dn, ts, tz, iv, ia, ta, "Wëird ""col""") VALUES
	   (3, 'b', '-$0.01', '{}', '-Infinity', 'NaN', '-Infinity', '294276-12-31 23:59:59.999999', '4713-01-01 00:00:00+00 BC',
	    '0', '{{{1}}}', '{}', ''),
	   (4, 'b', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`,
	// Unchanged TOAST of bytea, jsonb and text stored out of line; the generated column changes.
	`UPDATE vals SET i8 = 7 WHERE id = 2; UPDATE vals SET owner = 'c', t = NULL WHERE id = 2`,
	// Then changed.
	`UPDATE vals SET jbig = '[1]', bybig = '\x01', tbig = 'short' WHERE id = 2`,
	// Hostile text keys.
	`INSERT INTO "Sch ""q"".x"."T,1 *" VALUES (E'k \\ "q" \n é 😀', 'a', 1), ('', 'a', 2), (' ', 'b', 3), ('NULL', 'b', 4);
	 UPDATE "Sch ""q"".x"."T,1 *" SET n = n + 10; DELETE FROM "Sch ""q"".x"."T,1 *" WHERE "Kéy ""q""" = ' '`,
	// One transaction over many relations, interleaved, with a row changed several times.
	`INSERT INTO m1 VALUES (1, 'a', 'x'), (-2147483648, 'a', NULL), (2147483647, 'b', '');
	 INSERT INTO m2 VALUES (-9223372036854775808, 'a', '1e-5'), (9223372036854775807, 'b', '"\u00e9"');
	 INSERT INTO m2 VALUES (1, 'a', '{"x": [1, {"y": null}]}');
	 INSERT INTO m3 VALUES ('a57ed9d5-6a54-425c-9020-046b195f0265', 'a', '\xdeadbeef'); INSERT INTO m4 VALUES ('k', 'a', '{1,NULL,-32768}');
	 UPDATE vals SET owner = 'a' WHERE id = 3; UPDATE m1 SET v = 'y'; UPDATE m2 SET owner = 'b';
	 INSERT INTO "Sch ""q"".x"."T,1 *" VALUES ('m', 'a', 5); DELETE FROM m3; UPDATE m1 SET owner = 'c'; DELETE FROM vals WHERE id = 4;
	 INSERT INTO m3 VALUES ('a57ed9d5-6a54-425c-9020-046b195f0265', 'b', '\x'); UPDATE m4 SET v = '[5:5]={7}'`,
}

// Checked and sound: values whose text or precision could differ between the
// decoders (money, bit and varbit, empty and out-of-line bytea, json with duplicate
// keys, white space, escapes and numbers past float range, jsonb, text with control
// characters and escape-like text, float4/float8/numeric arrays and domains with NaN,
// ±Infinity, -0 and subnormals, numeric with huge and tiny exponents, timestamps with
// infinity and BC, timetz, interval extremes, ranges and multiranges with infinite
// bounds, multidimensional arrays with bounds and NULLs, enums and enum arrays, inet,
// cidr, macaddr, tsvector, xml, pg_lsn, oid, "char", name, char(n)), a column dropped
// before registration, a generated column, quoted column names, a quoted schema and
// table with hostile text keys, unchanged TOAST of bytea, jsonb and text, and one
// transaction over six relations: the two decoders materialize the same txn, event,
// projection, membership, effect and change rows.
func TestDecoderEdgeValuesDifferential(t *testing.T) {
	t.Parallel()
	viaPgoutput, viaWal2json := decoderDifferential2(t, review2ValuesSchema, review2ValuesWorkload,
		[3]string{"vals", "vals", "id"}, [3]string{`"Sch ""q"".x"."T,1 *"`, "tk", `Kéy "q"`},
		[3]string{"m1", "m1", "id"}, [3]string{"m2", "m2", "id"}, [3]string{"m3", "m3", "id"}, [3]string{"m4", "m4", "id"})
	for _, tb := range differentialTables {
		require.NotEmpty(t, viaPgoutput[tb], tb)
		require.Equal(t, viaPgoutput[tb], viaWal2json[tb], "synchro.%s differs between pgoutput and wal2json", tb)
	}
	require.GreaterOrEqual(t, len(viaPgoutput["txn"]), len(review2ValuesWorkload))
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed; found through "columns with names that need care", outside the decoders):
// the fence trigger's full check (sql/functions/_fence_source.sql, CTE p) joins the
// registered table as "LEFT JOIN ONLY schema.table t ON t.<key> = k::<type>", where k is
// the PL/pgSQL variable holding the key text. When the registered table has a column
// named k (the key or any other column), "k" in that ON clause is ambiguous
// (plpgsql.variable_conflict = error): 42702. The full check runs for every second
// change of a row in one transaction and for every nested fence, push's writes among
// them, so such a table cannot be changed twice in a transaction and cannot be pushed
// to at all (push fails the whole call with 42702, which is not a rejection). A legal
// write PostgreSQL accepts is refused by the pack; CONTRACT "Push": 42702 is none of
// the documented outcomes. Fix: qualify the variable (the block label of the function,
// e.g. <<fence>> ... fence.k) or give the PL/pgSQL variables names no column can
// take, as the template already does for the key (%13$s) elsewhere.
// ---------------------------------------------------------------------------------
func TestDecoderEdgeFenceColumnNamedK(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE kcol (id int8 PRIMARY KEY, owner text, k text);
		SELECT synchro.register_table('kcol', 'kcol');
		SELECT synchro.add_scope_rule('kcol', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	_, err := db.Pool.Exec(ctx, `INSERT INTO kcol VALUES (1, 'a', 'x'); UPDATE kcol SET k = 'y' WHERE id = 1`)
	assert.NoError(t, err, "an insert and an update of one row in one transaction")
	raw, err := pushRawOn(ctx, db.Pool, "dev", pushJSON(t, pushIns(pushID(), "kcol", 2, pm{"owner": "a", "k": "z"})))
	if assert.NoError(t, err, "push into a table with a column named k") {
		assert.Contains(t, raw, `"accepted"`)
	}
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): replica-identity drift that wal2json's documents do not show. ADR
// 001: any later drift of the replica identity blocks capture. pgoutput's Relation
// message carries relreplident with the next change of the table, so the stream
// blocked (relation_drift) at the first write after the ALTER; wal2json carries the
// identity only in an update's or delete's identity list, and an insert after
// REPLICA IDENTITY NOTHING carries none, while USING INDEX over a unique index of the
// key column alone names exactly the key, as DEFAULT's does: such writes were
// materialized under wal2json until the next session start. The fence now refuses them
// at the source under both decoders (TestFenceRefusesReplicaIdentityDrift), so neither
// sees them; a write that bypasses the fence triggers still blocks pgoutput's capture
// (TestRunnerPoisonReplicaIdentityFull).
// ---------------------------------------------------------------------------------
func TestDecoderEdgeReplicaIdentityDrift(t *testing.T) {
	for _, c := range []struct{ name, alter, writes string }{
		{"nothing", `ALTER TABLE items REPLICA IDENTITY NOTHING`, `INSERT INTO items VALUES (3, 'a')`},
		{"index_on_key", `CREATE UNIQUE INDEX items_id_uq ON items (id); ALTER TABLE items REPLICA IDENTITY USING INDEX items_id_uq`,
			`INSERT INTO items VALUES (3, 'a'); UPDATE items SET owner = 'b' WHERE id = 1; DELETE FROM items WHERE id = 2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachDecoder(t, func(t *testing.T) {
				t.Parallel()
				db := testdb.New(t)
				mustExec(t, db, `
					CREATE TABLE items (id int8 PRIMARY KEY, owner text);
					SELECT synchro.register_table('items', 'items');
					SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
					SELECT synchro.activate_registry();
					INSERT INTO items VALUES (1, 'a'), (2, 'a');`)
				rr := startRunner(t, testRunnerConfig(t, db))
				waitStream(t, db)
				// The session streams (its catalog shape read) before the ALTER.
				write(t, db, `INSERT INTO items VALUES (10, 'a')`)
				mustExec(t, db, c.alter)
				for _, w := range strings.Split(c.writes, "; ") {
					_, err := db.Pool.Exec(context.Background(), w)
					requireSQLState(t, err, "0A000")
				}
				mustExec(t, db, `ALTER TABLE items REPLICA IDENTITY DEFAULT`)
				write(t, db, `INSERT INTO items VALUES (11, 'a')`)
				require.Empty(t, protoSettle(t, db), "nothing reached either stream, nothing blocks")
				require.Equal(t, 0, countOf(t, db, `SELECT count(*)::int FROM synchro.projection WHERE pk = '3'`))
				require.NoError(t, rr.stop(t))
			})
		})
	}
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): COPY into a registered table. The fence triggers are
// AFTER ROW triggers, which do not stop COPY's multi-insert (PostgreSQL falls back to
// single inserts only for BEFORE or INSTEAD OF row triggers), so the rows of one COPY
// buffer are one XLOG_HEAP2_MULTI_INSERT record and logical decoding gives every one
// of them that record's LSN (decode.c, DecodeMultiInsert: buf->origptr). wal2json
// prints that shared change->lsn in each "I" document, and the decoder's changeLSN
// refuses a change whose lsn is not strictly after the previous one
// ("change lsn out of transaction order", transaction_framing): a COPY PostgreSQL
// accepted poisons the stream under wal2json, while pgoutput (no per-change LSN in its
// payload) materializes it. LESSONS.md lists exactly this (Debezium lost events that
// shared one LSN: COPY and multi-row inserts). Fix: accept equal change LSNs
// (l < s.lastChange is the out-of-order case; l == s.lastChange is a multi-insert).
// ---------------------------------------------------------------------------------
func TestDecoderEdgeCopyIntoRegisteredTable(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := runnerSetup(t)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		write(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		tag, err := conn.Conn().PgConn().CopyFrom(ctx, strings.NewReader("20\ta\t1\t\\N\n21\tb\t2\tx\n22\ta\t3\ty\n"),
			`COPY items (id, owner, v, note) FROM STDIN`)
		conn.Release()
		require.NoError(t, err)
		require.EqualValues(t, 3, tag.RowsAffected())
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (23, 'a')`)
		require.Empty(t, protoSettle(t, db), "a COPY PostgreSQL accepted is materialized, not quarantined")
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// Checked and sound: a registered table dropped and created again under the same name
// while a wal2json session streams. wal2json's add-tables names tables, not OIDs, so
// the new table's first rows do reach the decoder under the old relation, but the
// set-based materialization refuses that batch (SYB01) and the runner re-reads it one
// transaction at a time in a new session, whose table set (read by OID) no longer holds
// the dropped table: the new table's rows are not decoded, as under pgoutput, whose
// publication held the old OID only. (Sound by way of the fallback, not by design.)
func TestDecoderEdgeRecreatedTableWhileStreaming(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE items (id int8 PRIMARY KEY, owner text);
			CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
			SELECT synchro.register_table('items', 'items');
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		write(t, db, `INSERT INTO notes VALUES ('n1', 'a', 'old table')`)
		mustExec(t, db, `DROP TABLE notes; CREATE TABLE notes (id text PRIMARY KEY, owner text, body text)`)
		mustExec(t, db, `INSERT INTO notes VALUES ('m1', 'a', 'new table, not registered yet')`)
		mustExec(t, db, `INSERT INTO items VALUES (1, 'a')`)
		require.Empty(t, protoSettle(t, db), "writes to a table that is not registered (yet) block nothing")
		require.Equal(t, 1, countOf(t, db, `SELECT count(*)::int FROM synchro.event WHERE pk = '1'`))
		require.Zero(t, countOf(t, db, `SELECT count(*)::int FROM synchro.event WHERE pk = 'm1'`))
		require.NoError(t, rr.stop(t))
	})
}

// ---------------------------------------------------------------------------------
// A registered table dropped while the runner is behind (stopped, restarting, or
// lagging across a session start), the documented way to replace a table (drop,
// create again, rebind_relation: TestRebindRecreatedTable). pgoutput decodes the WAL
// before the DROP with the publication as of its position and materializes the old
// table's last writes. wal2json names tables, not OIDs (add-tables): the session
// reads its table set from the live catalog, where the old table is gone, and leaving
// its name in add-tables would decode the new table of the same name as the old one.
// So its writes before the drop are not decoded, their fences are, and the transaction
// is quarantined (fence_mismatch): a documented difference (docs/decoders.md, "A
// registered table dropped while the runner is behind"; found by the second decoder
// review), as for a renamed table. Recovery: a stream reset.
// ---------------------------------------------------------------------------------
func TestDecoderEdgeDroppedTableWritesBeforeDrop(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE items (id int8 PRIMARY KEY, owner text);
			CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
			SELECT synchro.register_table('items', 'items');
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		cfg := testRunnerConfig(t, db)
		rr := startRunner(t, cfg)
		waitStream(t, db)
		write(t, db, `INSERT INTO notes VALUES ('n1', 'a', 'old table')`)
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)

		// While the runner is stopped: a last write to the old table, then drop and create again.
		mustExec(t, db, `INSERT INTO notes VALUES ('n0', 'a', 'last write to the old table')`)
		mustExec(t, db, `DROP TABLE notes; CREATE TABLE notes (id text PRIMARY KEY, owner text, body text)`)
		mustExec(t, db, `INSERT INTO items VALUES (1, 'a')`)
		rr = startRunner(t, cfg)
		q := protoSettle(t, db)
		if decoderOf(t) == "wal2json" {
			require.Len(t, q, 1, "the documented difference: the old table's last write is not decoded, its fence is")
			require.Equal(t, "fence_mismatch", q[0].Class)
			require.NoError(t, rr.stop(t))
			return
		}
		require.Empty(t, q, "the old table's committed write before the drop is materialized, not quarantined")
		require.Equal(t, 1, countOf(t, db, `SELECT count(*)::int FROM synchro.event WHERE pk = 'n0'`),
			"the old table's last write materialized")
		require.NoError(t, rr.stop(t))
	})
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): a TRUNCATE of two registered tables that reaches
// the WAL (triggers bypassed). pgoutput sends one Truncate message naming both and
// materialization quarantines the transaction with the class the ADR and
// docs/errors.md give it, truncate (SYP02), whose documented recovery is a stream
// reset (TestResetRecoversTruncatePoison, one table only). wal2json sends one "T"
// document per relation, all with the truncate record's LSN, and the decoder's
// changeLSN refuses the second as out of transaction order: the quarantine record
// says transaction_framing, a decoder failure, instead of truncate. The poison is the
// same transaction, but its bounded failure class (ADR 001: "the quarantine record
// identifies ... bounded failure class") differs between decoders and misleads the
// operator. Fix: the same as for COPY's multi-insert (equal change LSNs are not out of
// order), or merge consecutive T documents of one LSN into one Truncate message.
// ---------------------------------------------------------------------------------
func TestDecoderEdgeTruncateOfTwoRegisteredTables(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE items (id int8 PRIMARY KEY, owner text);
			CREATE TABLE notes (id text PRIMARY KEY, owner text);
			SELECT synchro.register_table('items', 'items');
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		write(t, db, `INSERT INTO items VALUES (1, 'a')`)
		mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE items, notes; COMMIT;`)
		q := protoSettle(t, db)
		require.Len(t, q, 1)
		require.Equal(t, "truncate", q[0].Class, "the quarantine's failure class")
		require.NoError(t, rr.stop(t))
	})
}

// ---------------------------------------------------------------------------------
// Was a bug (fixed): a registered table named "*" (or in
// a schema named "*") stops a wal2json runner at every session start (config_invalid:
// "a registered schema or table named * cannot be named to wal2json"), though
// registration accepts it and pgoutput streams it. The refusal rests on a wrong
// reading of wal2json: its add-tables parser (wal2json.c, parse_table_identifier)
// tests for the "*" wildcard BEFORE it removes escapes, so the escaped name "\*" the
// decoder already writes (escapeName) is the literal name, never a wildcard. Fix:
// drop the refusal in tableName. The test also writes to an unregistered table to show
// that "public.\*" selects only the table named "*".
// ---------------------------------------------------------------------------------
func TestDecoderEdgeWal2jsonTableNamedStar(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE "*" (id int8 PRIMARY KEY, owner text);
			CREATE TABLE other (id int8 PRIMARY KEY, owner text);
			SELECT synchro.register_table('"*"', 'star');
			SELECT synchro.add_scope_rule('star', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStreamOrExit(t, db, rr, "the runner refused a registered table named *")
		mustExec(t, db, `INSERT INTO other VALUES (1, 'a'); INSERT INTO "*" VALUES (1, 'a')`)
		require.Empty(t, protoSettle(t, db))
		require.Empty(t, protoDiverged(t, db, `"*"`, "star", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// Checked and sound: the other multi-row statement shapes under both decoders:
// INSERT ... SELECT of many rows (one WAL record per row, unlike COPY), INSERT ... ON
// CONFLICT DO UPDATE and DO NOTHING (speculative insertions), rows changed several
// times in one transaction, and a statement over two registered tables through a
// writable CTE.
func TestDecoderEdgeMultiRowStatements(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		for _, sql := range []string{
			`INSERT INTO items (id, owner, v) SELECT i, 'o' || (i % 3), i FROM generate_series(100, 399) i`,
			`INSERT INTO items (id, owner, v) VALUES (100, 'x', 1), (400, 'y', 2), (1, 'z', 3)
			   ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, v = items.v + excluded.v`,
			`INSERT INTO items (id, owner) VALUES (101, 'nothing'), (401, 'n') ON CONFLICT DO NOTHING`,
			`UPDATE items SET v = v + 1 WHERE id BETWEEN 150 AND 160; UPDATE items SET note = 'again' WHERE id BETWEEN 155 AND 165;
			 DELETE FROM items WHERE id BETWEEN 158 AND 170`,
			`WITH a AS (INSERT INTO notes SELECT 'n' || i, 'o1', repeat('x', i) FROM generate_series(1, 50) i RETURNING id)
			 UPDATE items SET note = (SELECT count(*) FROM a)::text WHERE id = 2`,
		} {
			mustExec(t, db, sql)
		}
		require.Empty(t, protoSettle(t, db))
		require.Empty(t, protoDiverged(t, db, "items", "items", "id", nil))
		require.Empty(t, protoDiverged(t, db, "notes", "notes", "id", nil))
		require.NoError(t, rr.stop(t))
	})
}

// TestFenceRefusesReplicaIdentityDrift: the fence refuses a write to a registered table
// whose replica identity is no longer DEFAULT (ADR 001: FULL, NOTHING and USING INDEX
// are unsupported), at the source, on both its paths: a top-level statement (the fast
// path's guard compares the identity index with the key's, then the full check reads
// the catalog), a write from a DO block, the second change of a row in one
// transaction. Back to DEFAULT, and after REINDEX CONCURRENTLY of the key (a new index
// OID: the guard misses, the full check lets it through), the table is written again.
func TestFenceRefusesReplicaIdentityDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE rid (id int8 PRIMARY KEY, owner text NOT NULL);
		CREATE UNIQUE INDEX rid_id_uq ON rid (id);
		CREATE UNIQUE INDEX rid_owner_uq ON rid (id, owner);
		SELECT synchro.register_table('rid', 'rid');
		SELECT synchro.add_scope_rule('rid', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO rid VALUES (1, 'a'), (2, 'a');`)
	for _, identity := range []string{"NOTHING", "FULL", "USING INDEX rid_id_uq", "USING INDEX rid_owner_uq"} {
		mustExec(t, db, `ALTER TABLE rid REPLICA IDENTITY `+identity)
		for _, w := range []string{
			`INSERT INTO rid VALUES (3, 'a')`,
			`UPDATE rid SET owner = 'b' WHERE id = 1`,
			`DELETE FROM rid WHERE id = 2`,
			`DO $$ BEGIN INSERT INTO rid VALUES (4, 'a'); END $$`,
			`BEGIN; INSERT INTO rid VALUES (5, 'a'); UPDATE rid SET owner = 'b' WHERE id = 5; COMMIT`,
		} {
			if identity == "NOTHING" && (strings.Contains(w, "UPDATE") || strings.HasPrefix(w, "DELETE")) {
				continue // PostgreSQL itself refuses an update or delete without an identity (55000)
			}
			_, err := db.Pool.Exec(ctx, w)
			requireSQLState(t, err, "0A000")
		}
	}
	mustExec(t, db, `ALTER TABLE rid REPLICA IDENTITY DEFAULT`)
	mustExec(t, db, `INSERT INTO rid VALUES (3, 'a'); DO $$ BEGIN UPDATE rid SET owner = 'b' WHERE id = 3; END $$`)
	mustExec(t, db, `REINDEX INDEX CONCURRENTLY rid_pkey`)
	mustExec(t, db, `BEGIN; INSERT INTO rid VALUES (5, 'a'); UPDATE rid SET owner = 'c' WHERE id = 5; COMMIT; DELETE FROM rid WHERE id = 1`)
	require.Equal(t, 3, countOf(t, db, `SELECT count(*)::int FROM rid`)) // 2, 3 and 5
}

// wal2json and a stranger's huge logical message (known, not fixed: docs/decoders.md,
// "A message too large for wal2json"). The runner warns at start while every role may
// call pg_logical_emit_message, and not once the documented remedy is applied (EXECUTE
// revoked from PUBLIC in the application's database, granted to the pack's owner;
// here the owner is the harness's superuser, which needs no grant): the fences and
// activations, which emit as the owner, still reach the stream.
func TestDecoderEdgeWal2jsonWarnsWhilePublicEmitsMessages(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	db := runnerSetup(t)
	const warning = "every role may call pg_logical_emit_message"
	run := func(id int) string {
		logs := &lockedBuffer{}
		cfg := testRunnerConfig(t, db)
		cfg.Decoder = "wal2json"
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		rr := startRunner(t, cfg)
		waitStream(t, db)
		mustExec(t, db, fmt.Sprintf(`INSERT INTO items (id, owner) VALUES (%d, 'a')`, 10+id))
		waitEffects(t, db, id)
		require.NoError(t, rr.stop(t))
		return logs.String()
	}
	require.Contains(t, run(1), warning)

	mustExec(t, db, `
		REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text),
		                           pg_catalog.pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC;
		GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean, text, text),
		                          pg_catalog.pg_logical_emit_message(boolean, text, bytea) TO CURRENT_USER;`)
	require.NotContains(t, run(2), warning)
	requireNoQuarantine(t, db)
}

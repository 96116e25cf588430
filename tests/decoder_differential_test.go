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

// differentialSchema is the fixture's schema: every registered column type the
// tests use (int8, int4, text, json) and more (bool, jsonb, bytea, timestamptz, uuid,
// varchar, int[], numeric through a domain: wal2json cannot carry a bare numeric's NaN,
// docs/decoders.md), keys of the types registration accepts (int8, text, uuid, varchar),
// a TOASTed column, a dependency with a via rule.
const differentialSchema = `
	CREATE DOMAIN exact_numeric AS numeric;
	CREATE TABLE docs (id int8 PRIMARY KEY, owner text, team text, v int NOT NULL DEFAULT 0, note text,
	  body json, meta jsonb, flag bool, blob bytea, at timestamptz, u uuid, code varchar(8), tags int[],
	  amount exact_numeric, big text);
	ALTER TABLE docs ALTER big SET STORAGE EXTERNAL;
	CREATE TABLE members (id int8 PRIMARY KEY, team text, user_id text);
	CREATE TABLE ukeys (id uuid PRIMARY KEY, owner text, n int4);
	CREATE TABLE vkeys (id varchar(20) PRIMARY KEY, owner text, n int4);
	SELECT synchro.register_table('docs', 'docs');
	SELECT synchro.register_table('ukeys', 'ukeys');
	SELECT synchro.register_table('vkeys', 'vkeys');
	SELECT synchro.add_scope_rule('ukeys', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('vkeys', 'owner:', 'owner');
	SELECT synchro.register_dependency('members');
	SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
	SELECT synchro.add_scope_rule('docs', 'user:', 'team', 'members', 'team', 'user_id');
	SELECT synchro.activate_registry();
	INSERT INTO docs (id, owner, team, note) VALUES (1, 'a', 't1', 'baseline');
	INSERT INTO members VALUES (1, 't1', 'alice');`

// differentialWorkload is the committed fixture workload, one statement list per
// source transaction.
var differentialWorkload = []string{
	// Every type, NULLs, a TOASTed value.
	`INSERT INTO docs VALUES (2, 'a', 't1', 5, E'quote " backslash \\ newline \n tab \t é 😀', '{"k" : [1, 2.50, null]}',
	   '{"z": {"y": [true, false]}}', true, '\x00ff10', '2020-01-02 03:04:05.123456+02', 'a57ed9d5-6a54-425c-9020-046b195f0265',
	   'ab', '{1,NULL,3}', 12345678901234567890.123456789000, repeat('é', 4000)),
	   (3, 'b', NULL, 0, NULL, NULL, NULL, false, NULL, NULL, NULL, NULL, NULL, 'NaN', NULL)`,
	// The TOASTed column left untouched by an update; a row changed several times.
	`UPDATE docs SET note = 'touched', v = v + 1 WHERE id = 2;
	 UPDATE docs SET v = v + 1 WHERE id = 2;
	 UPDATE docs SET owner = 'c', amount = -0.000100 WHERE id = 3`,
	// A dependency change moves docs of team t1 into scope user:bob.
	`INSERT INTO members VALUES (2, 't1', 'bob');
	 UPDATE members SET user_id = 'carol' WHERE id = 1`,
	// Inserted and deleted in one transaction, and a delete.
	`INSERT INTO docs (id, owner) VALUES (4, 'a'); UPDATE docs SET owner = 'b' WHERE id = 4; DELETE FROM docs WHERE id = 4;
	 DELETE FROM docs WHERE id = 1`,
	// The other key types registration accepts (uuid, varchar): insert, update, delete (a key
	// change is refused at the source).
	`INSERT INTO ukeys VALUES ('0f5b6c1e-2d3a-4b8c-9e7f-a1b2c3d4e5f6', 'a', 1), ('8b6f1a52-3c1e-4f0a-9d2b-7e4c5a6b1c03', 'b', 2);
	 INSERT INTO vkeys VALUES ('k one', 'a', 1), ('k"two\', 'b', 2);
	 UPDATE ukeys SET n = 3, owner = 'c' WHERE n = 1;
	 UPDATE vkeys SET n = 4 WHERE id = 'k one';
	 DELETE FROM ukeys WHERE n = 2; DELETE FROM vkeys WHERE n = 2`,
	// A push.
	`SELECT synchro.push('device-1', '[{"id": "7d0f6f3e-1b52-4a25-8f7c-0a3b6f9a2c11", "table": "docs", "op": "insert",
	   "pk": 5, "row": {"owner": "a", "note": "pushed", "flag": true}}]')`,
	// A registry activation registering an empty table, written in the same transaction.
	`CREATE TABLE later (id text PRIMARY KEY, owner text, n int4);
	 SELECT synchro.register_table('later', 'later');
	 SELECT synchro.add_scope_rule('later', 'owner:', 'owner');
	 SELECT synchro.activate_registry();
	 INSERT INTO later VALUES ('x', 'a', 1);
	 UPDATE docs SET note = 'after activation' WHERE id = 2`,
	// Transactional messages nobody materializes (an unknown synchro. prefix, a stranger's).
	`SELECT pg_logical_emit_message(true, 'synchro.other', '{}');
	 SELECT pg_logical_emit_message(true, 'someone.else', 'x');
	 UPDATE later SET n = NULL WHERE id = 'x'`,
	// Transactions that carry a logical message only: a stranger's, one under an unknown
	// synchro. prefix, binary content under the fence prefix (not UTF-8, a NUL byte:
	// wal2json copies the bytes verbatim and stops at the NUL), and a non-transactional
	// one. pgoutput materializes the transactional ones as transactions without events.
	`SELECT pg_logical_emit_message(true, 'someone.else', 'alone')`,
	`SELECT pg_logical_emit_message(true, 'synchro.other', 'alone')`,
	`SELECT pg_logical_emit_message(true, 'synchro.fence', '\xff41fe00424344'::bytea)`,
	`SELECT pg_logical_emit_message(false, 'synchro.fence', '\xc3'::bytea)`,
	// A transaction outside the table set only (pgoutput sends nothing for it).
	`CREATE TABLE scratch (n int); INSERT INTO scratch VALUES (1)`,
}

// differentialTables are the synchro tables materialization writes (change: the
// consumer groups' stream), as compared:
// every column but timestamps (*_at), one JSON text per row, sorted.
var differentialTables = []string{"txn", "event", "projection", "membership", "effect", "change"}

// TestDecoderDifferential runs the fixture workload once and reads it through a
// pgoutput stream and a wal2json stream of the same database, from the same position
// (the wal2json slot is a copy of the pgoutput slot): the synchro tables after
// materialization are identical. A difference fails the test.
func TestDecoderDifferential(t *testing.T) {
	t.Parallel()
	d := runDecoderDifferential(t, differentialSchema, differentialWorkload)
	viaPgoutput, viaWal2json, ignored := d.viaPgoutput, d.viaWal2json, d.ignored

	for _, tb := range differentialTables {
		require.NotEmpty(t, viaPgoutput[tb], tb)
		require.Equal(t, viaPgoutput[tb], viaWal2json[tb], "synchro.%s differs between pgoutput and wal2json", tb)
	}
	require.Equal(t, ignored["pgoutput"], ignored["wal2json"], "dropped synchro. messages by reason")
	for _, reason := range []string{"non_transactional", "unknown_prefix", "malformed"} {
		require.Positive(t, ignored["pgoutput"][reason], "the fixture has a synchro. message dropped as %s", reason)
	}
	// The fixture reached what it is for: effects of every kind of change.
	require.GreaterOrEqual(t, len(viaPgoutput["txn"]), 7, "every workload transaction but the one outside the table set")
}

// differential is what runDecoderDifferential read through each decoder: the
// materialized synchro tables (snapshotTables) and the runner's count of dropped
// synchro. messages by reason.
type differential struct {
	viaPgoutput, viaWal2json map[string][]string
	ignored                  map[string]map[string]float64
}

// runDecoderDifferential runs workload (one simple-protocol call per source
// transaction) after schema, reads it through a pgoutput stream and through a
// wal2json stream that starts at the same position (a copy of the pgoutput slot), and
// returns what each materialized. checkLive names tables ({relation, table_id, key
// column}) whose projections must also equal their live rows after the workload.
func runDecoderDifferential(t *testing.T, schema string, workload []string, checkLive ...[3]string) differential {
	t.Helper()
	testdb.RequireLibrary(t, "wal2json")
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, schema)

	// The pgoutput stream, caught up with the baseline, then stopped.
	pg := testRunnerConfig(t, db)
	pg.Decoder = "pgoutput"
	rr := startRunner(t, pg)
	waitStream(t, db)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	// The wal2json slot starts where the pgoutput slot is; the stream state is kept to
	// run it again from there.
	w2jSlot := "w2j_" + pg.Slot[max(0, len(pg.Slot)-59):]
	mustExec(t, db, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot('%s', '%s', false, 'wal2json')`, pg.Slot, w2jSlot))
	// The stream's state (what materialization writes; the registry, row versions and
	// push outcomes are the source's and stay).
	tables := []string{"txn", "event", "projection", "membership", "effect", "change", "rule_value", "progress",
		"quarantine", "runner", "stream_generation", "write_fence"}
	mustExec(t, db, `CREATE SCHEMA snap`)
	for _, tb := range tables {
		mustExec(t, db, fmt.Sprintf(`CREATE TABLE snap.%[1]s AS SELECT * FROM synchro.%[1]s`, tb))
	}

	for _, sql := range workload {
		_, err := db.Pool.Exec(ctx, sql) // one simple-protocol call: one transaction
		require.NoError(t, err, sql)
	}
	var end string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&end))

	// The runner's count of dropped synchro. messages, by reason: the same messages
	// reach the collator under either decoder.
	ignored := make(map[string]map[string]float64)
	materialize := func(decoder, slot string) map[string][]string {
		cfg := testRunnerConfig(t, db)
		cfg.Decoder, cfg.Slot = decoder, slot
		r := startRunner(t, cfg)
		eventually(t, 30*time.Second, decoder+" materialization of the workload", func() bool {
			p, ok := runnerState(t, db)
			require.True(t, ok)
			require.Nil(t, p.PoisonClass, "%s: poison", decoder)
			return lsnOf(t, p.Processed) >= lsnOf(t, &end)
		})
		ignored[decoder] = make(map[string]float64)
		for _, reason := range []string{"non_transactional", "unknown_prefix", "malformed", "unauthenticated"} {
			ignored[decoder][reason] = r.counter(t, "synchro_runner_ignored_messages_total", "reason", reason)
		}
		require.NoError(t, r.stop(t))
		waitRunnerGone(t, db)
		require.Empty(t, quarantines(t, db), decoder)
		return snapshotTables(t, db)
	}
	viaPgoutput := materialize("pgoutput", pg.Slot)

	// Back to the state before the workload, with the stream on the wal2json slot.
	restore := []string{"BEGIN", "SET LOCAL session_replication_role = replica"}
	for _, tb := range tables {
		if tb == "write_fence" {
			// Push fences of the workload: uncovered again, as before materialization.
			restore = append(restore, `UPDATE synchro.write_fence SET coverage = NULL, covered_at = NULL
				WHERE fence_id NOT IN (SELECT fence_id FROM snap.write_fence)`)
			continue
		}
		cols := insertableColumns(t, db, tb)
		restore = append(restore, `DELETE FROM synchro.`+tb, fmt.Sprintf(
			`INSERT INTO synchro.%[1]s (%[2]s) OVERRIDING SYSTEM VALUE SELECT %[2]s FROM snap.%[1]s`, tb, cols))
	}
	restore = append(restore, fmt.Sprintf(`UPDATE synchro.stream_generation SET slot_name = '%s', plugin = 'wal2json'`, w2jSlot),
		"COMMIT")
	mustExec(t, db, strings.Join(restore, ";\n"))
	viaWal2json := materialize("wal2json", w2jSlot)
	for _, c := range checkLive {
		var cols []string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT columns::text[] FROM synchro.registry WHERE table_id = $1`, c[1]).Scan(&cols))
		require.Empty(t, protoDiverged(t, db, c[0], c[1], c[2], cols), "%s: images equal to_jsonb of the live rows", c[1])
	}
	return differential{viaPgoutput: viaPgoutput, viaWal2json: viaWal2json, ignored: ignored}

}

// insertableColumns lists a synchro table's columns that an INSERT may set (not
// generated), quoted.
func insertableColumns(t *testing.T, db *testdb.DB, table string) string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT quote_ident(a.attname) FROM pg_attribute a
		 WHERE a.attrelid = ('synchro.' || quote_ident($1))::regclass AND a.attnum > 0 AND NOT a.attisdropped
		   AND a.attgenerated = '' ORDER BY a.attnum`, table)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(cols, ", ")
}

// snapshotTables renders differentialTables: each row as JSON text without its
// timestamp columns (*_at: when the runner wrote it), sorted.
func snapshotTables(t *testing.T, db *testdb.DB) map[string][]string {
	t.Helper()
	out := make(map[string][]string)
	for _, tb := range differentialTables {
		rows, err := db.Pool.Query(context.Background(), fmt.Sprintf(`
			SELECT (SELECT jsonb_object_agg(k, v) FROM jsonb_each(to_jsonb(x)) AS e(k, v) WHERE k NOT LIKE '%%\_at')::text AS j
			  FROM synchro.%s x ORDER BY 1`, tb))
		require.NoError(t, err)
		vals, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		out[tb] = vals
	}
	return out
}

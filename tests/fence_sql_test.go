package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Push reads the row as the caller (SELECT ... FOR UPDATE) before it locks the
// reservation. A concurrent transaction deletes the row and inserts it again (same key)
// and commits while push waits for the row lock: under READ COMMITTED the locked tuple
// is gone, push saw no row and answered "conflict" with a null version and row, though
// the row existed with a new version (found by review). CONTRACT.md Push: a conflict
// "carries the current version and row, both present and null when the row is absent".
// Push reads the row again in a new statement; the insert path already did.
func TestPushUpdateRacesDeleteAndInsert(t *testing.T) {
	t.Parallel()
	// insert: the same race on the insert path answers right (it reads the row again
	// after the reservation's lock); it stays as the contrast.
	for _, op := range []string{"update", "delete", "insert"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			e := pushSetup(t)
			e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
			base := e.version("items", "1")

			txA, err := e.db.Pool.Begin(e.ctx)
			require.NoError(t, err)
			defer func() { _ = txA.Rollback(context.Background()) }()
			_, err = txA.Exec(e.ctx, `DELETE FROM public.items WHERE id = 1`)
			require.NoError(t, err)
			_, err = txA.Exec(e.ctx, `INSERT INTO public.items (id, name) VALUES (1, 'again')`)
			require.NoError(t, err)

			idB := pushID()
			m := pushUpd(idB, "items", 1, base, pm{"name": "from-b"})
			switch op {
			case "delete":
				m = pushDel(idB, "items", 1, base)
			case "insert":
				m = pushIns(idB, "items", 1, pm{"name": "from-b"})
			}
			pid, ch := e.pushInBackground("cb", pushJSON(t, m))
			pushWaitForLock(t, e.ctx, e.db.Pool, pid)
			pushRequireBlocked(t, ch)
			require.NoError(t, txA.Commit(e.ctx))
			vNow := e.version("items", "1")
			require.True(t, e.itemExists(1))

			res := pushParse(t, pushAwait(t, ch))
			t.Logf("push result: %v", res[0])
			row := pushConflict(t, res[0], idB, vNow)
			require.JSONEq(t, e.itemRow(1), string(row))
		})
	}
}

// fenceCatchUp writes a marker row and waits until the runner has materialized it, then
// requires that the materialized projection of items equals the live table (same keys,
// same registered values, same versions as the reservations) and that nothing is
// quarantined.
func fenceCatchUp(t *testing.T, db *testdb.DB, marker int) {
	t.Helper()
	mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES ($1, 'zz', 0)`, marker)
	eventually(t, 20*time.Second, "the marker to materialize", func() bool {
		if len(quarantines(t, db)) > 0 {
			return true
		}
		return countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = $1`, fmt.Sprint(marker)) == 1
	})
	require.Empty(t, quarantines(t, db), "nothing quarantined")
	rid := itemsRelationID(t, db)
	require.Zero(t, countOf(t, db, `
		SELECT count(*) FROM (SELECT id::text AS pk, to_jsonb(i) AS image FROM items i) l
		FULL JOIN (SELECT pk, image FROM synchro.projection WHERE relation_id = $1) p USING (pk)
		WHERE l.image IS DISTINCT FROM p.image`, rid), "projection equals the live table")
	require.Zero(t, countOf(t, db, `
		SELECT count(*) FROM synchro.projection p
		LEFT JOIN synchro.row_version rv USING (relation_id, pk)
		WHERE p.relation_id = $1 AND p.version IS DISTINCT FROM rv.version`, rid), "projection versions are the reservations'")
}

// Unusual but legal SQL on a registered table, end to end through the runner: MERGE,
// a writable CTE that deletes and re-inserts one key in one statement, savepoints rolled
// back after fenced writes, COPY, a deferred constraint trigger that changes a
// registered row at commit, a trigger that writes another row, ON CONFLICT DO UPDATE
// on a row inserted earlier in the same transaction. Each must materialize exactly
// (no quarantine, projection equals the live rows).
func TestFenceUnusualSQLMaterializes(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	rr := startRunner(t, testRunnerConfig(t, db))
	defer func() { require.NoError(t, rr.stop(t)) }()
	waitStream(t, db)
	ctx := context.Background()

	// MERGE: update, insert and delete actions in one statement.
	mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES (3, 'a', 3), (4, 'a', 4)`)
	mustExec(t, db, `MERGE INTO items t
		USING (VALUES (1, 'a', 10), (3, 'a', 0), (5, 'b', 50)) s(id, owner, v) ON t.id = s.id
		WHEN MATCHED AND s.v = 0 THEN DELETE
		WHEN MATCHED THEN UPDATE SET v = s.v
		WHEN NOT MATCHED THEN INSERT (id, owner, v) VALUES (s.id, s.owner, s.v)`)
	// A writable CTE deletes a key and the main statement inserts it again.
	mustExec(t, db, `WITH d AS (DELETE FROM items WHERE id = 2 RETURNING id)
		INSERT INTO items (id, owner, v) SELECT id, 'c', 99 FROM d`)
	// Savepoints: fenced writes rolled back, released, and changes after them.
	mustExec(t, db, `BEGIN;
		UPDATE items SET v = 41 WHERE id = 4;
		SAVEPOINT s1;
		UPDATE items SET v = 42 WHERE id = 4;
		DELETE FROM items WHERE id = 4;
		INSERT INTO items (id, owner, v) VALUES (4, 'q', 43);
		ROLLBACK TO SAVEPOINT s1;
		SAVEPOINT s2;
		UPDATE items SET v = 44 WHERE id = 4;
		RELEASE SAVEPOINT s2;
		SAVEPOINT s3;
		INSERT INTO items (id, owner, v) VALUES (6, 'a', 6);
		ROLLBACK TO SAVEPOINT s3;
		UPDATE items SET v = 45 WHERE id = 4;
		COMMIT;`)
	// COPY into the registered table, in a transaction with other writes of those keys.
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = conn.Conn().PgConn().CopyFrom(ctx, stringsReader("10\ta\t1\t\\N\n11\tb\t2\tx\n"), `COPY items (id, owner, v, note) FROM STDIN`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id IN (10, 11); DELETE FROM items WHERE id = 11; COMMIT`)
	require.NoError(t, err)
	conn.Release()
	// A deferred constraint trigger changes the inserted row at commit.
	mustExec(t, db, `CREATE FUNCTION bump_later() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE public.items SET v = v + 1000 WHERE id = NEW.id; RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER z_bump_later AFTER INSERT ON items DEFERRABLE INITIALLY DEFERRED
		  FOR EACH ROW WHEN (NEW.owner = 'deferred') EXECUTE FUNCTION bump_later();`)
	mustExec(t, db, `BEGIN;
		INSERT INTO items (id, owner, v) VALUES (20, 'deferred', 1);
		UPDATE items SET note = 'n' WHERE id = 20;
		INSERT INTO items (id, owner, v) VALUES (21, 'deferred', 1) ON CONFLICT (id) DO UPDATE SET v = 7;
		INSERT INTO items (id, owner, v) VALUES (21, 'deferred', 1) ON CONFLICT (id) DO UPDATE SET v = 8;
		COMMIT;`)
	// SET CONSTRAINTS fires the deferred trigger mid-transaction, then more writes.
	mustExec(t, db, `BEGIN;
		INSERT INTO items (id, owner, v) VALUES (22, 'deferred', 1);
		SET CONSTRAINTS ALL IMMEDIATE;
		UPDATE items SET v = v + 1 WHERE id = 22;
		COMMIT;`)
	// An AFTER trigger (after the fence, by name) that writes another row of the table.
	mustExec(t, db, `CREATE FUNCTION mirror() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.items (id, owner, v) VALUES (NEW.id + 100, 'mirror', NEW.v)
		  ON CONFLICT (id) DO UPDATE SET v = excluded.v; RETURN NULL; END $$;
		CREATE TRIGGER z_mirror AFTER INSERT OR UPDATE ON items FOR EACH ROW WHEN (NEW.owner = 'm')
		  EXECUTE FUNCTION mirror();`)
	mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES (30, 'm', 1), (31, 'm', 2)`)
	mustExec(t, db, `UPDATE items SET v = v * 10 WHERE owner = 'm'`)
	fenceCatchUp(t, db, 999)
}

// COPY ... FREEZE into a registered relation is refused with 0A000 (CONTRACT.md, Source
// guards). The fence recognises it by the statement text; it matched
// '\mcopy\M[^;]*\mfreeze\M', which a semicolon between COPY and FREEZE defeated: a
// semicolon delimiter (common for CSV files), a NULL string or a comment (found by
// review). Only the rare path (the relation installed or given a new file in this
// transaction) reads the text, so a false refusal there costs little.
func TestCopyFreezeRefusedWhateverTheStatementHolds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, copy, data string }{
		{"Delimiter", `COPY fz FROM STDIN WITH (FORMAT csv, DELIMITER ';', FREEZE)`, "1;a\n2;b\n"},
		{"NullString", `COPY fz FROM STDIN WITH (NULL ';', FREEZE)`, "1\ta\n2\t;\n"},
		{"Comment", "COPY fz FROM STDIN /* bulk; load */ WITH (FREEZE)", "1\ta\n2\tb\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			conn, err := db.Pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			_, err = conn.Exec(ctx, `BEGIN;
				CREATE TABLE fz (id int8 PRIMARY KEY, note text);
				SELECT synchro.register_table('fz', 'fz');
				SELECT synchro.activate_registry();`)
			require.NoError(t, err)
			tag, err := conn.Conn().PgConn().CopyFrom(ctx, stringsReader(tc.data), tc.copy)
			if err == nil {
				// Frozen: HEAP_XMIN_FROZEN (0x0300) in the tuples' infomask (pageinspect,
				// when the server has it).
				frozen := -1
				if _, err := conn.Exec(ctx, `SAVEPOINT pi; CREATE EXTENSION IF NOT EXISTS pageinspect`); err == nil {
					require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM heap_page_items(get_raw_page('fz', 0))
						WHERE t_infomask & 768 = 768`).Scan(&frozen))
				}
				t.Logf("COPY FREEZE accepted: %d rows, %d frozen", tag.RowsAffected(), frozen)
			}
			_, _ = conn.Exec(ctx, `ROLLBACK`)
			requireSQLState(t, err, "0A000")
		})
	}
}

// A hostile application role (owner of its own schema and tables, member of synchro_app)
// tries to reach fence state without a registered write: attach the registered
// relation's generated fence to a table of its own (authentic fence messages for rows
// that never changed), regenerate or reinstall fences, write the reservations, or emit
// a fence-prefixed message. Each is refused with 42501 and nothing reaches the WAL
// under the fence prefix.
func TestFenceHostileCannotReuseFence(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	h := newHostileApp(t, db, true)
	s := h.qs()
	slot := createSlot(t, db)
	rid := textOf(t, db, `SELECT relation_id::text FROM synchro.relation WHERE table_id = 'app_t'`)
	h.exec(fmt.Sprintf(`CREATE TABLE %[1]s.decoy (id text PRIMARY KEY, body text)`, s))
	for _, stmt := range []string{
		fmt.Sprintf(`CREATE TRIGGER f AFTER INSERT ON %[1]s.decoy FOR EACH ROW EXECUTE FUNCTION synchro._fence_%[2]s()`, s, rid),
		fmt.Sprintf(`SELECT synchro._install_triggers(%s)`, rid),
		fmt.Sprintf(`SELECT synchro._fence_source(%s)`, rid),
		fmt.Sprintf(`INSERT INTO synchro.row_version (relation_id, pk, version) VALUES (%s, 'x', 'v')`, rid),
		fmt.Sprintf(`UPDATE synchro.row_version SET version = 'forged' WHERE relation_id = %s`, rid),
		`SELECT synchro._refuse_key_change()`,
		`SELECT synchro._push_leave(1, 'seed')`,
	} {
		_, err := h.conn.Exec(h.ctx, stmt)
		requireSQLState(t, err, "42501")
	}
	h.exec(fmt.Sprintf(`INSERT INTO %[1]s.decoy VALUES ('seed', 'b')`, s))
	require.Empty(t, fences(t, peek(t, db, slot)), "no fence for a row of an unregistered table")
}

package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The fence's tuple identity (migration 00032: the place (file, ctid) of the
// tuple a fence covered, sql/functions/_fence_source.sql). Each test asserts the correct
// behaviour: a legal transaction commits with the right data; a nested statement that
// changes a row whose outer change's fence is still pending fails with 27000.

// placeSetup is fenceSetup plus bump(i) (a nested UPDATE of items row i: its fence takes
// the full check and records a place), and helpers for nested delete/insert.
func placeSetup(t *testing.T) *testdb.DB {
	t.Helper()
	db, _ := fenceSetup(t)
	mustExec(t, db, `
		CREATE FUNCTION bump(i int8) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN UPDATE public.items SET v = v + 1 WHERE id = i; END $$;
		CREATE FUNCTION del(i int8) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM public.items WHERE id = i; END $$;
		CREATE FUNCTION ins(i int8, nv int) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.items (id, v) VALUES (i, nv); END $$;`)
	return db
}

// placeTx runs stmts on a fresh session inside BEGIN ... COMMIT, one Exec each, and
// returns the first error (after a ROLLBACK).
func placeTx(t *testing.T, db *testdb.DB, stmts ...string) error {
	t.Helper()
	ctx := context.Background()
	c := reviewSession(t, db.URL, nil)
	if _, err := c.Exec(ctx, `BEGIN`); err != nil {
		return err
	}
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			_, _ = c.Exec(ctx, `ROLLBACK`)
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	_, err := c.Exec(ctx, `COMMIT`)
	return err
}

func placeCtid(t *testing.T, c *pgx.Conn, id int) string {
	t.Helper()
	var s string
	require.NoError(t, c.QueryRow(context.Background(), `SELECT ctid::text FROM items WHERE id = $1`, id).Scan(&s))
	return s
}

// TestFencePlaceCTEReplaceAfterEarlierFence: a writable CTE deletes a row and the
// main statement inserts it again (TestFenceUnusualSQLMaterializes does this as the
// row's first change in its transaction). No nested statement: the two fences fire in
// the order of the two row operations, and the transaction is legal. Here the row was
// already fenced earlier in the same transaction, so the delete's fence takes the full
// check; it runs when the statement ends, after the insert, and records the live
// tuple (the re-inserted one) as the tuple it covered. The insert's fence then found
// that very tuple live and refused the transaction (27000 "fence order violation"),
// with the (xmin, cmin) identity as with the place: a fence recorded the live tuple
// when it fired, not what its own operation left. A delete's fence now records no
// tuple (sql/functions/_fence_source.sql).
func TestFencePlaceCTEReplaceAfterEarlierFence(t *testing.T) {
	t.Parallel()
	db := placeSetup(t)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0)`)
	err := placeTx(t, db,
		`UPDATE items SET v = 1 WHERE id = 1`,
		`WITH d AS (DELETE FROM items WHERE id = 1 RETURNING id) INSERT INTO items (id, v) SELECT id, 2 FROM d`)
	require.NoError(t, err, "a legal delete-and-reinsert in one statement was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 2`))
}

// TestFencePlaceCTEReplaceNested: the same single statement run by a function
// (a nested statement, so every fence of it takes the full check even as the row's
// first in the transaction). Still nothing out of order: no fence of the row is pending
// outside that statement. Refused the same way before a delete's fence stopped recording
// a tuple.
func TestFencePlaceCTEReplaceNested(t *testing.T) {
	t.Parallel()
	db := placeSetup(t)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0)`)
	mustExec(t, db, `CREATE FUNCTION replace_item(i int8, nv int) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN
		  WITH d AS (DELETE FROM public.items WHERE id = i RETURNING id)
		  INSERT INTO public.items (id, v) SELECT id, nv FROM d;
		END $$;`)
	err := placeTx(t, db, `SELECT replace_item(1, 5)`)
	require.NoError(t, err, "a legal delete-and-reinsert in one nested statement was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 5`))
}

// placeExec runs one statement on c and requires it to succeed.
func placeExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	_, err := c.Exec(context.Background(), sql, args...)
	require.NoError(t, err, sql)
}

// placeVacuum vacuums items from another session while c's transaction is open: it
// removes the tuples of c's aborted subtransactions (dead to every snapshot) and frees
// their line pointers for reuse, which opportunistic pruning inside c's own transaction
// would not do (the page's prune xid is c's, still running). It cannot remove a tuple
// c's live (sub)transactions wrote.
func placeVacuum(t *testing.T, db *testdb.DB) {
	t.Helper()
	mustExec(t, db, `VACUUM (TRUNCATE false, INDEX_CLEANUP on) items`)
}

// placeIllegal runs, inside c's open transaction and under a savepoint rolled back
// afterwards, an outer UPDATE of row id whose AFTER trigger (named before the fences,
// so it fires first) updates the same row again: the nested update's fence fires
// before the outer update's, which is then late and must be refused with 27000 (the
// fence's message, not PostgreSQL's own 27000 for a row changed twice by one command).
// One row, so the outcome does not depend on the order in which a scan meets rows.
func placeIllegal(t *testing.T, c *pgx.Conn, id int) {
	t.Helper()
	ctx := context.Background()
	placeExec(t, c, `SAVEPOINT illegal`)
	placeExec(t, c, fmt.Sprintf(`SET LOCAL place.nest = '%d'`, id))
	_, err := c.Exec(ctx, fmt.Sprintf(`UPDATE items SET v = v + 1000 WHERE id = %d`, id))
	pgErr := requireSQLState(t, err, "27000")
	require.Contains(t, pgErr.Message, "fence order violation")
	placeExec(t, c, `ROLLBACK TO SAVEPOINT illegal`)
}

// placeNestTrigger installs the trigger placeIllegal relies on: inactive unless the
// session sets place.nest to the row's id.
func placeNestTrigger(t *testing.T, db *testdb.DB) {
	t.Helper()
	mustExec(t, db, `CREATE FUNCTION place_nest() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF pg_trigger_depth() = 1 AND NEW.id::text = current_setting('place.nest', true) THEN
		    UPDATE public.items SET v = v + 100000 WHERE id = NEW.id;
		  END IF;
		  RETURN NULL;
		END $$;
		CREATE TRIGGER a_place_nest AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION place_nest();`)
}

// TestFencePlaceLinePointerReuse: the place of a recorded tuple must never be
// taken by another tuple while the transaction runs. One transaction updates rows in
// subtransactions that abort (their tuples dead at once), another session vacuums so
// their line pointers are freed, and then the row is changed again by nested
// statements (full check: a place recorded each time) and top-level ones. The premise:
// later versions of row 1 do land on places an aborted version had (line pointers are
// reused inside the transaction). Every change is legal and must pass; no live
// version of the row may land where an earlier, non-aborted version of it was; and an
// illegal ordering in the middle of all this is still refused.
func TestFencePlaceLinePointerReuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := placeSetup(t)
	placeNestTrigger(t, db)
	mustExec(t, db, `INSERT INTO items (id, v) SELECT g, 0 FROM generate_series(1, 30) g`)
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	aborted := map[string]bool{}
	kept := map[string]int{} // place of a non-aborted version of row 1 -> round
	reused := 0
	note := func(round int, where string) {
		t.Helper()
		p := placeCtid(t, c, 1)
		if r, ok := kept[p]; ok {
			t.Fatalf("round %d (%s): row 1 landed at %s, where its version of round %d still is", round, where, p, r)
		}
		if aborted[p] {
			reused++
		}
		kept[p] = round
	}
	const rounds = 25
	for r := 0; r < rounds; r++ {
		placeExec(t, c, `SAVEPOINT s`)
		for k := 0; k < 3; k++ {
			placeExec(t, c, `UPDATE items SET note = repeat('x', 40) WHERE id <= 30`)
			aborted[placeCtid(t, c, 1)] = true
			placeExec(t, c, `SELECT bump(1)`)
			aborted[placeCtid(t, c, 1)] = true
		}
		placeExec(t, c, `ROLLBACK TO SAVEPOINT s`)
		placeVacuum(t, db)
		placeExec(t, c, `SELECT bump(1)`) // nested: records its place
		note(r, "nested")
		placeExec(t, c, `UPDATE items SET v = v + 1 WHERE id = 1`) // top-level, full check
		note(r, "top-level")
		if r%5 == 4 {
			placeIllegal(t, c, 1)
			placeIllegal(t, c, 2)
		}
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = $1`, 2*rounds))
	require.Equal(t, 29, countOf(t, db, `SELECT count(*) FROM items WHERE id > 1 AND v = 0 AND note IS NULL`))
	t.Logf("row 1 took a freed (aborted) place %d times", reused)
	require.Positive(t, reused, "premise: a later version of row 1 reuses the line pointer of an aborted one")
}

// TestFencePlaceSavepointRolledBackAfterNestedFence: a nested fence records a
// place inside a savepoint that is rolled back (its record goes with it); the dead
// tuple's line pointer is freed and the row's next version lands there. The record is
// the place from before the savepoint, the live tuple is elsewhere: legal, and must
// pass. An illegal ordering right after must still be refused.
func TestFencePlaceSavepointRolledBackAfterNestedFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := placeSetup(t)
	placeNestTrigger(t, db)
	mustExec(t, db, `INSERT INTO items (id, v) SELECT g, 0 FROM generate_series(1, 5) g`)
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	placeExec(t, c, `SELECT bump(1)`)
	before := placeCtid(t, c, 1)
	landedOnAborted := 0
	goneAll := map[string]bool{}
	for r := 0; r < 10; r++ {
		placeExec(t, c, `SAVEPOINT s`)
		placeExec(t, c, `SELECT bump(1)`)
		gone := placeCtid(t, c, 1)
		placeExec(t, c, `ROLLBACK TO SAVEPOINT s`)
		require.Equal(t, before, placeCtid(t, c, 1))
		placeVacuum(t, db)
		placeExec(t, c, `SELECT bump(1)`)
		now := placeCtid(t, c, 1)
		require.NotEqual(t, before, now)
		goneAll[gone] = true
		if goneAll[now] {
			landedOnAborted++
		}
		placeIllegal(t, c, 1)
		placeIllegal(t, c, 2)
		before = now
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 11`))
	require.Equal(t, 4, countOf(t, db, `SELECT count(*) FROM items WHERE id > 1 AND v = 0`))
	t.Logf("the next version landed on a rolled-back version's place %d of 10 times", landedOnAborted)
	require.Positive(t, landedOnAborted, "premise: the row's next version reuses a rolled-back version's line pointer")
}

// TestFencePlaceDeleteReinsert: deletes and re-inserts of one key in one
// transaction, nested and top-level, with aborted attempts vacuumed away in between
// (their places free). All legal; the final row must be the last insert's. Then the
// illegal forms: an AFTER DELETE trigger (fires before the fence) re-inserting the key
// whose delete fence is pending, and an AFTER INSERT trigger deleting the just-inserted
// row.
func TestFencePlaceDeleteReinsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := placeSetup(t)
	mustExec(t, db, `INSERT INTO items (id, v) SELECT g, 0 FROM generate_series(1, 10) g`)
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	for r := 0; r < 8; r++ {
		placeExec(t, c, `SAVEPOINT s`)
		placeExec(t, c, `SELECT del(1)`)
		placeExec(t, c, fmt.Sprintf(`SELECT ins(1, %d)`, 1000+r))
		placeExec(t, c, `ROLLBACK TO SAVEPOINT s`)
		placeVacuum(t, db)
		placeExec(t, c, `SELECT del(1)`)                                            // nested delete
		placeExec(t, c, fmt.Sprintf(`SELECT ins(1, %d)`, r))                        // nested insert
		placeExec(t, c, `DELETE FROM items WHERE id = 1`)                           // top-level
		placeExec(t, c, fmt.Sprintf(`INSERT INTO items (id, v) VALUES (1, %d)`, r)) // top-level
		placeExec(t, c, `SELECT bump(1)`)
		placeExec(t, c, `SELECT del(1)`)
		placeExec(t, c, fmt.Sprintf(`INSERT INTO items (id, v) VALUES (1, %d)`, 10*r))
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 70`))

	// Illegal, in one transaction after legal delete/re-inserts of the same keys.
	mustExec(t, db, `CREATE FUNCTION reinsert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF current_setting('place.re', true) = 'on' THEN
		  INSERT INTO public.items (id, v) VALUES (OLD.id, 9); END IF; RETURN NULL; END $$;
		CREATE TRIGGER a_reinsert AFTER DELETE ON items FOR EACH ROW EXECUTE FUNCTION reinsert();
		CREATE FUNCTION undo() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF current_setting('place.undo', true) = 'on' THEN
		  DELETE FROM public.items WHERE id = NEW.id; END IF; RETURN NULL; END $$;
		CREATE TRIGGER a_undo AFTER INSERT ON items FOR EACH ROW EXECUTE FUNCTION undo();`)
	c2 := reviewSession(t, db.URL, nil)
	placeExec(t, c2, `BEGIN`)
	placeExec(t, c2, `SELECT del(2)`)
	placeExec(t, c2, `SELECT ins(2, 1)`)
	placeExec(t, c2, `SAVEPOINT a`)
	placeExec(t, c2, `SET LOCAL place.re = 'on'`)
	_, err = c2.Exec(ctx, `DELETE FROM items WHERE id = 2`)
	pgErr := requireSQLState(t, err, "27000")
	require.Contains(t, pgErr.Message, "fence order violation")
	placeExec(t, c2, `ROLLBACK TO SAVEPOINT a`)
	placeVacuum(t, db)
	placeExec(t, c2, `SELECT del(4)`)
	placeExec(t, c2, `SAVEPOINT b`)
	placeExec(t, c2, `SET LOCAL place.undo = 'on'`)
	_, err = c2.Exec(ctx, `INSERT INTO items (id, v) VALUES (4, 5)`)
	pgErr = requireSQLState(t, err, "27000")
	require.Contains(t, pgErr.Message, "fence order violation")
	placeExec(t, c2, `ROLLBACK TO SAVEPOINT b`)
	placeExec(t, c2, `COMMIT`)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM items WHERE id = 4`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 2 AND v = 1`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 3 AND v = 0`))
}

// TestFencePlaceManyPagesNonHotToast: rows spread over many pages, an index on v
// (so a change of v is never HOT: every update moves the tuple, usually to another
// page), TOASTed notes. Legal changes of the same rows, nested and top-level, pass;
// the illegal ordering (row b updated by a nested statement while its outer update's
// fence is pending, b on another page than a, b's value TOASTed) is refused.
func TestFencePlaceManyPagesNonHotToast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := placeSetup(t)
	placeNestTrigger(t, db)
	mustExec(t, db, `CREATE INDEX items_v ON items (v);
		ALTER TABLE items ALTER COLUMN note SET STORAGE EXTERNAL;
		INSERT INTO items (id, v, note) SELECT g, 0, CASE WHEN g % 100 = 0 THEN
		  (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 200) i) END
		FROM generate_series(1, 3000) g;`)
	require.Positive(t, countOf(t, db, `SELECT (pg_relation_size('items') / 8192)::int - 10`), "premise: many pages")
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	pages := map[string]bool{}
	page := func() {
		p := placeCtid(t, c, 2900)
		pages[strings.SplitN(strings.Trim(p, "()"), ",", 2)[0]] = true
	}
	page()
	for r := 0; r < 10; r++ {
		placeExec(t, c, `SELECT bump(100)`)
		placeExec(t, c, `UPDATE items SET v = v + 1, note = note || 'x' WHERE id IN (100, 2900)`)
		placeExec(t, c, `SELECT bump(2900)`)
		placeExec(t, c, `SAVEPOINT s`)
		placeExec(t, c, `UPDATE items SET v = v + 1 WHERE id % 7 = 0`)
		placeExec(t, c, `ROLLBACK TO SAVEPOINT s`)
		placeVacuum(t, db)
		page()
		placeIllegal(t, c, 100)
		placeIllegal(t, c, 2900)
		placeIllegal(t, c, 1)
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM items WHERE id IN (100, 2900) AND v = 20
		AND length(note) = 6400 + 10`))
	require.Greater(t, len(pages), 1, "premise: row 2900 moved between pages")
}

// TestFencePlaceRewriteWhileFencePending: the soundness argument says no rewrite
// (new file, places reshuffled) can come between a nested fence and the late fence it
// must catch, because PostgreSQL refuses to rewrite a table with trigger events
// pending. Confirmed here from inside the application's AFTER trigger, after the nested
// update of row 2 and while row 2's outer fence is pending: CLUSTER and a rewriting
// ALTER TABLE fail with 55006 (object in use). When the trigger catches that error and
// goes on, the late fence is still refused with 27000.
func TestFencePlaceRewriteWhileFencePending(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"Cluster", `CLUSTER public.items USING items_pkey`},
		{"AlterType", `ALTER TABLE public.items ALTER COLUMN note TYPE varchar(100)`},
		{"AlterTypeRewrite", `ALTER TABLE public.items ALTER COLUMN v TYPE int8`},
		{"SetLogged", `ALTER TABLE public.items SET UNLOGGED`},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := placeSetup(t)
			mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0), (2, 0)`)
			mustExec(t, db, `CREATE FUNCTION rw() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
				  IF NEW.id = 1 THEN
				    UPDATE public.items SET v = v + 100 WHERE id = 2;
				    IF current_setting('place.catch', true) = 'on' THEN
				      BEGIN `+tc.ddl+`;
				      EXCEPTION WHEN object_in_use THEN RAISE NOTICE 'rewrite refused';
				      END;
				    ELSE `+tc.ddl+`;
				    END IF;
				  END IF;
				  RETURN NULL;
				END $$;
				CREATE TRIGGER a_rw AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION rw();`)
			c := reviewSession(t, db.URL, nil)
			placeExec(t, c, `BEGIN`)
			placeExec(t, c, `SELECT bump(2)`)
			var before string
			require.NoError(t, c.QueryRow(ctx, `SELECT pg_relation_filenode('items')::text`).Scan(&before))
			_, err := c.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id IN (1, 2)`)
			requireSQLState(t, err, "55006")
			_, _ = c.Exec(ctx, `ROLLBACK`)

			placeExec(t, c, `BEGIN`)
			placeExec(t, c, `SELECT bump(2)`)
			placeExec(t, c, `SET LOCAL place.catch = 'on'`)
			_, err = c.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id IN (1, 2)`)
			pgErr := requireSQLState(t, err, "27000")
			require.Contains(t, pgErr.Message, "fence order violation")
			_, _ = c.Exec(ctx, `ROLLBACK`)
			require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM items WHERE v = 0`))
		})
	}
}

// TestFencePlacePushInTransaction: synchro.push writes each mutation by a nested
// statement (every fence of it takes the full check and records a place). One
// transaction interleaves pushes of one row with top-level updates of it, aborted
// subtransactions and a concurrent vacuum freeing their places. All legal: every
// mutation accepted, the transaction commits, the row holds the last value.
func TestFencePlacePushInTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := pushSetup(t)
	e.exec(`INSERT INTO public.tags (name, n) SELECT 't' || g, 0 FROM generate_series(1, 20) g`)
	c := reviewSession(t, e.db.URL, nil)
	placeExec(t, c, `BEGIN`)
	version := func() string {
		var v string
		require.NoError(t, c.QueryRow(ctx, `SELECT rv.version FROM synchro.row_version rv
			JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'tags' AND rv.pk = 't1'`).Scan(&v))
		return v
	}
	for r := 0; r < 15; r++ {
		placeExec(t, c, `SAVEPOINT s`)
		placeExec(t, c, `UPDATE public.tags SET n = n + 1`)
		placeExec(t, c, `ROLLBACK TO SAVEPOINT s`)
		_, err := e.db.Pool.Exec(ctx, `VACUUM (TRUNCATE false, INDEX_CLEANUP on) public.tags`)
		require.NoError(t, err)
		id := pushID()
		raw, err := pushRawOn(ctx, c, "c1", pushJSON(t, pushUpd(id, "tags", "t1", version(), pm{"n": 10 * r})))
		require.NoError(t, err)
		pushAccepted(t, pushParse(t, raw)[0], id, true)
		placeExec(t, c, `UPDATE public.tags SET n = n + 1 WHERE name = 't1'`)
		id = pushID()
		raw, err = pushRawOn(ctx, c, "c1", pushJSON(t, pushUpd(id, "tags", "t1", version(), pm{"n": 10*r + 5})))
		require.NoError(t, err)
		pushAccepted(t, pushParse(t, raw)[0], id, true)
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM public.tags WHERE name = 't1' AND n = 145`))
}

// TestFencePlaceNestedChangeRolledBack: while the outer update of row 1 has its
// fence pending, the application's AFTER trigger (fires first) updates row 1 again
// inside an EXCEPTION block and then raises, so that nested change and its fence's
// record roll back together. Nothing out of order survives: the transaction is legal
// and must commit (the row holds the outer updates only). The row was fenced by nested
// statements before, so there is a recorded place to compare against, and a vacuum
// frees the rolled-back versions' places between rounds. Kept instead (no raise), the
// same nested change must be refused with 27000; and so must a nested update of the
// row from a function called by a statement whose writable CTE updated it.
func TestFencePlaceNestedChangeRolledBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := placeSetup(t)
	placeNestTrigger(t, db)
	mustExec(t, db, `INSERT INTO items (id, v) SELECT g, 0 FROM generate_series(1, 5) g`)
	mustExec(t, db, `CREATE FUNCTION try_twice() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF pg_trigger_depth() = 1 AND current_setting('place.try', true) = 'on' THEN
		    BEGIN
		      UPDATE public.items SET v = v + 100 WHERE id = NEW.id;
		      RAISE EXCEPTION 'undo';
		    EXCEPTION WHEN raise_exception THEN NULL;
		    END;
		  END IF;
		  RETURN NULL;
		END $$;
		CREATE TRIGGER a_try_twice AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION try_twice();`)
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	for r := 0; r < 6; r++ {
		placeExec(t, c, `SELECT bump(1)`)
		placeExec(t, c, `SET LOCAL place.try = 'on'`)
		placeExec(t, c, `UPDATE items SET v = v + 1 WHERE id IN (1, 2)`)
		placeExec(t, c, `SET LOCAL place.try = 'off'`)
		placeVacuum(t, db)
		placeIllegal(t, c, 1)
		placeIllegal(t, c, 2)
		placeExec(t, c, `SAVEPOINT cte`)
		_, err := c.Exec(ctx, `WITH u AS (UPDATE items SET v = v + 1 WHERE id = 1 RETURNING id) SELECT bump(id) FROM u`)
		pgErr := requireSQLState(t, err, "27000")
		require.Contains(t, pgErr.Message, "fence order violation")
		placeExec(t, c, `ROLLBACK TO SAVEPOINT cte`)
	}
	_, err := c.Exec(ctx, `COMMIT`)
	require.NoError(t, err, "a legal transaction was refused")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 12`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 2 AND v = 6`))
}

// TestFencePlaceLateDeleteAfterNestedInsertDelete: an application trigger that, on the
// delete of a row, inserts the key again and deletes it in nested statements fires
// those two fences before the outer delete's (AFTER ROW triggers run in name order:
// a_churn before synchro_fence_delete). The late delete then found no live tuple and no
// recorded place (a delete's fence records none), the check let it through, and the
// runner paired the outer delete event with the nested insert's fence: fence_mismatch,
// the stream blocked for every scope (found by review, 2026-12-05; migration 00033).
// It must fail with 27000 in the writer, with the stream unharmed; the legal
// transactions with two deletes of one key (an insert fenced between them) commit
// and flow.
func TestFencePlaceLateDeleteAfterNestedInsertDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnvSchema(t, syncSchema)
	db := e.db
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner) SELECT g, 1, 'a' FROM generate_series(1, 6) g;
		CREATE FUNCTION del(i int8) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM public.tasks WHERE id = i; END $$;
		CREATE FUNCTION ins(i int8, o text) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO public.tasks (id, project_id, owner) VALUES (i, 1, o); END $$;
		CREATE FUNCTION churn() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF pg_trigger_depth() = 1 AND current_setting('place.churn', true) IN ('1', '2') THEN
		    FOR r IN 1 .. current_setting('place.churn')::int LOOP
		      INSERT INTO public.tasks (id, project_id, owner) VALUES (OLD.id, 1, 'b');
		      DELETE FROM public.tasks WHERE id = OLD.id;
		    END LOOP;
		  END IF;
		  RETURN NULL;
		END $$;
		CREATE TRIGGER a_churn AFTER DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION churn();`)
	catchUp(t, db)
	// A device per scope the transactions touch, starting from a rebuild.
	scopes := []string{"owner:a", "owner:b", "owner:c", "owner:d", "owner:e"}
	reps, cursors := map[string]replica{}, map[string]string{}
	for _, sc := range scopes {
		rows, last := fullRebuild(t, db, "dev-"+sc, sc, 1000)
		reps[sc] = replica{}
		reps[sc].applyRebuild(t, rows)
		cursors[sc] = last.Cursor
	}

	// Illegal: one nested insert and delete, and two, behind the outer delete's fence.
	for _, n := range []string{"1", "2"} {
		c := reviewSession(t, db.URL, map[string]string{"place.churn": n})
		_, err := c.Exec(ctx, `DELETE FROM tasks WHERE id = 1`)
		pgErr := requireSQLState(t, err, "27000")
		require.Contains(t, pgErr.Message, "fence order violation", "churn %s", n)
		require.NoError(t, c.Close(ctx))
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM tasks WHERE id = 1 AND owner = 'a'`), "nothing was written")

	// Legal: two deletes of one key with an insert fenced between them, nested and
	// top-level, in one transaction and in one statement (the CTE's delete and insert
	// fences fire at its end, in row order).
	c := reviewSession(t, db.URL, nil)
	placeExec(t, c, `BEGIN`)
	placeExec(t, c, `SELECT del(2)`)
	placeExec(t, c, `SELECT ins(2, 'c')`)
	placeExec(t, c, `SELECT del(2)`)
	placeExec(t, c, `DELETE FROM tasks WHERE id = 3`)
	placeExec(t, c, `INSERT INTO tasks (id, project_id, owner) VALUES (3, 1, 'c')`)
	placeExec(t, c, `DELETE FROM tasks WHERE id = 3`)
	placeExec(t, c, `WITH d AS (DELETE FROM tasks WHERE id = 4 RETURNING id)
		INSERT INTO tasks (id, project_id, owner) SELECT id, 1, 'c' FROM d`)
	placeExec(t, c, `DELETE FROM tasks WHERE id = 4`)
	placeExec(t, c, `SELECT ins(4, 'd')`)
	placeExec(t, c, `COMMIT`)
	// The trigger's own legal churn: its nested fences after the outer delete's, in order.
	placeExec(t, c, `BEGIN`)
	placeExec(t, c, `DELETE FROM tasks WHERE id = 5`)
	placeExec(t, c, `SELECT ins(5, 'e')`)
	placeExec(t, c, `SELECT del(5)`)
	placeExec(t, c, `COMMIT`)

	catchUp(t, db)
	requireNoQuarantine(t, db)
	for _, sc := range scopes {
		changes, _ := pullAll(t, db, "dev-"+sc, sc, cursors[sc], 1000)
		reps[sc].apply(t, changes)
		requireReplica(t, liveScope(t, db, liveScopeSQL, sc), reps[sc], sc)
	}
	require.Len(t, reps["owner:a"], 2, "rows 1 and 6 stay with a")
	require.Len(t, reps["owner:d"], 1, "row 4 went to d")
}

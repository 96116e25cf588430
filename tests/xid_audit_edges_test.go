package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The xid/snapshot audit's edge cases (one file): places where the pack reasons about
// transaction ids, tuple identities and visibility under subtransactions.

// abortedTouchSQL is an application's "try, and ignore a duplicate" write in a
// PL/pgSQL EXCEPTION block (a subtransaction): the UPDATE marks the live tuple of row
// id deleted, then its unique index refuses the new tuple (23505) and the block rolls
// the subtransaction back. Nothing changed; but the live tuple, inserted earlier by this
// transaction, now carries a combo command id in place of its cmin (PostgreSQL
// combocid.c), and the system column cmin returns that raw field.
const abortedTouchSQL = `
	BEGIN
	  UPDATE public.items SET note = 'taken' WHERE id = %s;
	EXCEPTION WHEN unique_violation THEN NULL;
	END;`

// xidAuditItems is fenceSetup with a unique note (one row holds 'taken') and
// shift(n): n separate writes to an unregistered table, each its own command id. It
// moves the command ids of what follows against the combo ids, so that each case below
// is tried with several alignments of the two counters: the outcome must not depend on
// them.
func xidAuditItems(t *testing.T) *testdb.DB {
	t.Helper()
	db, _ := fenceSetup(t)
	mustExec(t, db, `
		CREATE UNIQUE INDEX items_note ON items (note);
		INSERT INTO items (id, v, note) VALUES (999, 0, 'taken');
		CREATE TABLE shift_log (n int);
		CREATE FUNCTION shift(n int) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN FOR i IN 1 .. n LOOP INSERT INTO public.shift_log VALUES (i); END LOOP; END $$;`)
	return db
}

// TestXidAuditFenceOrderCheckSurvivesAbortedSavepoint (was a bug until
// migration 00032): the fence's out-of-order check identified the tuple a nested fence
// covered by (xmin, cmin) (sql/functions/_fence_source.sql); it now uses the tuple's
// place (file, ctid). It is the
// TestFenceOrderViolation/AfterTriggerUpdatesLaterRow case (must fail with 27000),
// plus one aborted subtransaction in the application's trigger that touched the later
// row and changed nothing. That subtransaction turned the live tuple's cmin into a combo
// id, the late fence no longer recognized the tuple it covered, and the transaction
// committed with row 2's fences in the order TestFenceOrderViolation refuses (the k-th
// row event pairs with the k-th lowest ordinal: the outer change with the nested
// change's fence).
func TestXidAuditFenceOrderCheckSurvivesAbortedSavepoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := xidAuditItems(t)
	mustExec(t, db, `CREATE FUNCTION nest() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
		IF NEW.id % 10 = 1 THEN
		  PERFORM public.shift(current_setting('xa.shift')::int);
		  UPDATE public.items SET v = v + 100 WHERE id = NEW.id + 1;`+
		fmt.Sprintf(abortedTouchSQL, "NEW.id + 1")+`
		END IF;
		RETURN NULL; END $$;
		CREATE TRIGGER a_nest AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION nest();`)
	var committed []int
	for shift := 0; shift <= 4; shift++ {
		base := 10 * (shift + 1)
		mustExec(t, db, fmt.Sprintf(`INSERT INTO items (id, v) VALUES (%d, 0), (%d, 0)`, base+1, base+2))
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`BEGIN; SET LOCAL xa.shift = %d;
			UPDATE items SET v = v + 1 WHERE id IN (%d, %d); COMMIT;`, shift, base+1, base+2))
		if err == nil {
			committed = append(committed, shift)
			continue
		}
		_, _ = db.Pool.Exec(ctx, `ROLLBACK`)
		pgErr := requireSQLState(t, err, "27000")
		require.Contains(t, pgErr.Message, "fence order violation")
	}
	require.Empty(t, committed,
		"a nested update fenced before the outer update of the same row committed (shift values listed): "+
			"an aborted savepoint hid the already-fenced tuple from the (xmin, cmin) check")
}

// TestXidAuditFenceOrderNoSpuriousRefusalAfterAbortedSavepoint (was a bug until migration
// 00032): the other face of
// the same identity. Three plain top-level UPDATEs of one row in one transaction; the
// third's AFTER trigger (the application's, named before the fences) tries a duplicate
// note and ignores the 23505. Nothing is out of order, and the transaction must commit.
// The second update's fence (full check: not the row's first in the transaction)
// recorded its tuple as (xmin, cmin) before the fix; the third tuple has the same xmin, and its cmin
// column now returns a combo id. When that combo id equals the recorded cmin (it does
// for one of the alignments tried), the fence took the new tuple for the covered one and
// refused the transaction with 27000 "fence order violation".
func TestXidAuditFenceOrderNoSpuriousRefusalAfterAbortedSavepoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := xidAuditItems(t)
	mustExec(t, db, `CREATE FUNCTION try_note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN`+
		fmt.Sprintf(abortedTouchSQL, "NEW.id")+`
		RETURN NULL; END $$;
		CREATE TRIGGER a_try AFTER UPDATE ON items FOR EACH ROW WHEN (NEW.v = 3 AND pg_trigger_depth() = 0)
		  EXECUTE FUNCTION try_note();`)
	var refused []string
	for shift := 0; shift <= 5; shift++ {
		id := shift + 1
		mustExec(t, db, fmt.Sprintf(`INSERT INTO items (id, v) VALUES (%d, 0)`, id))
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`BEGIN;
			UPDATE items SET v = 1 WHERE id = %[1]d;
			SELECT shift(%[2]d);
			UPDATE items SET v = 2 WHERE id = %[1]d;
			UPDATE items SET v = 3 WHERE id = %[1]d;
			COMMIT;`, id, shift))
		if err != nil {
			_, _ = db.Pool.Exec(ctx, `ROLLBACK`)
			refused = append(refused, fmt.Sprintf("shift %d: %s", shift, sqlstateOf(err)))
		}
	}
	require.Empty(t, refused, "legal transactions refused:\n%s", strings.Join(refused, "\n"))
	require.Equal(t, 6, countOf(t, db, `SELECT count(*) FROM items WHERE v = 3`))
}

// TestXidAuditFenceOrderRewriteInTransaction: the tuple identity the check uses since
// migration 00032 is the tuple's place, and a rewrite in the same transaction (CLUSTER
// here; an ALTER TABLE that rewrites does the same) reuses places. The row is fenced by a
// nested statement (full check: its place is recorded), the table is rewritten, and a
// later top-level update of the row lands, in the new file, at the ctid the recorded
// tuple had in the old one. The test checks that it does: the rewrite drops the tuple of
// an aborted insert before it (dead whatever the snapshots of other transactions, where
// a committed delete's tuple is kept while any snapshot older than the delete runs,
// anywhere in the cluster) and keeps the row's two versions. Nothing is out of order and
// the transaction must commit: a ctid alone, or (xmin, ctid), refused it with 27000; the
// file number tells the two places apart.
func TestXidAuditFenceOrderRewriteInTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := fenceSetup(t)
	mustExec(t, db, `
		CREATE FUNCTION bump(i int8) RETURNS void LANGUAGE plpgsql AS $$
		BEGIN UPDATE public.items SET v = v + 1 WHERE id = i; END $$;
		INSERT INTO items (id) VALUES (1);`)
	// A transaction older than everything below, open throughout, as another test's
	// may be: the premise must not depend on the horizon.
	held := reviewSession(t, db.URL, nil)
	_, err := held.Exec(ctx, `BEGIN; SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	c := reviewSession(t, db.URL, nil)
	_, err = c.Exec(ctx, `BEGIN; INSERT INTO items (id) VALUES (2); ROLLBACK`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `BEGIN; SELECT bump(1)`)
	require.NoError(t, err)
	var recorded, landed string
	require.NoError(t, c.QueryRow(ctx, `SELECT ctid::text FROM items WHERE id = 1`).Scan(&recorded))
	_, err = c.Exec(ctx, `CLUSTER items USING items_pkey`)
	require.NoError(t, err)
	_, err = c.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id = 1`)
	if err == nil {
		require.NoError(t, c.QueryRow(ctx, `SELECT ctid::text FROM items WHERE id = 1`).Scan(&landed))
		_, err = c.Exec(ctx, `COMMIT`)
	} else {
		_, _ = c.Exec(ctx, `ROLLBACK`)
	}
	require.NoError(t, err, "a legal transaction refused after a rewrite")
	require.Equal(t, recorded, landed, "premise: the update after the rewrite lands at the place the fenced tuple had before it")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 1 AND v = 2`))
}

// TestXidAuditCopyFreezeAfterOverflowedSubtransactions (guard): synchro._file_changed_here
// widens the relation's pg_class xmin to 64 bits next to the current transaction's id
// and asks pg_xact_status whether it is in progress (only this transaction's can be).
// Here that xmin is a subtransaction id 70 levels deep, past the 64-entry subxid cache
// (each level wrote, so each has its own xid): still this transaction's, so COPY FREEZE
// after the rewrite (which PostgreSQL accepts in that subtransaction) is refused.
func TestXidAuditCopyFreezeAfterOverflowedSubtransactions(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE rv_deep (id text PRIMARY KEY, owner text);
		CREATE TABLE deep_log (n int);
		SELECT synchro.register_table('rv_deep', 'rv_deep');
		SELECT synchro.activate_registry();`)
	c := reviewSession(t, db.URL, nil)
	var b strings.Builder
	b.WriteString("BEGIN;")
	for i := 0; i < 70; i++ {
		fmt.Fprintf(&b, " SAVEPOINT s%d; INSERT INTO deep_log VALUES (%d);", i, i)
	}
	b.WriteString(" CLUSTER rv_deep USING rv_deep_pkey")
	_, err := c.Exec(ctx, b.String())
	require.NoError(t, err)
	var overflowed bool
	require.NoError(t, c.QueryRow(ctx, `SELECT (SELECT count(*) FROM deep_log) = 70
		AND (SELECT xmin FROM pg_class WHERE oid = 'rv_deep'::regclass)::text::int8
		    <> (pg_current_xact_id()::text::int8 & 4294967295)`).Scan(&overflowed))
	require.True(t, overflowed, "the pg_class row is a deep subtransaction's")
	_, err = c.PgConn().CopyFrom(ctx, strings.NewReader("k1\to\n"), `COPY rv_deep (id, owner) FROM STDIN (FREEZE)`)
	_, _ = c.Exec(ctx, `ROLLBACK`)
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstateOf(err), err.Error())
}

package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// fenceSetup registers public.items (synced, int8 key) and public.members (dependency,
// text key) and opens a pgoutput slot after activation.
func fenceSetup(t *testing.T) (*testdb.DB, string) {
	t.Helper()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, v int NOT NULL DEFAULT 0, note text);
		CREATE TABLE members (id text PRIMARY KEY, project_id int8, user_id text);
		SELECT synchro.register_table('items', 'items', ARRAY['v']::name[]);
		SELECT synchro.register_dependency('members');
		SELECT synchro.activate_registry();`)
	return db, createSlot(t, db)
}

func str(s string) *string { return &s }

func TestFenceMessageFields(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, slot := fenceSetup(t)
	var itemsRel, membersRel int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT relation_id FROM synchro.relation WHERE table_id = 'items'`).Scan(&itemsRel))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT relation_id FROM synchro.relation WHERE table_name = 'members'`).Scan(&membersRel))

	mustExec(t, db, `INSERT INTO items (id) VALUES (7)`)
	var v1 string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = '7'`, itemsRel).Scan(&v1))
	mustExec(t, db, `UPDATE items SET note = 'unregistered column only' WHERE id = 7`)
	mustExec(t, db, `DELETE FROM items WHERE id = 7`)
	mustExec(t, db, `INSERT INTO members VALUES ('m-1', 1, 'alice')`)
	mustExec(t, db, `UPDATE members SET user_id = 'bob'`)
	mustExec(t, db, `DELETE FROM members`)

	ds := peek(t, db, slot)
	require.Equal(t, []string{
		"B", "I:items", "M:synchro.fence", "C",
		"B", "U:items", "M:synchro.fence", "C",
		"B", "D:items", "M:synchro.fence", "C",
		"B", "I:members", "M:synchro.fence", "C",
		"B", "U:members", "M:synchro.fence", "C",
		"B", "D:members", "M:synchro.fence", "C",
	}, events(ds))
	fs := fences(t, ds)
	require.Len(t, fs, 6)

	// Synced fences carry table_id and the typed key; no capture_key.
	ins, upd, del := fs[0], fs[1], fs[2]
	for _, f := range []fenceMsg{ins, upd, del} {
		require.Equal(t, 3, f.V)
		require.Equal(t, "synced", f.Kind)
		require.Equal(t, itemsRel, f.RelationID)
		require.Equal(t, "public", f.Schema)
		require.Equal(t, "items", f.Table)
		require.Equal(t, str("items"), f.TableID)
		require.JSONEq(t, `7`, string(f.PK), "int8 keys are JSON numbers")
		require.Nil(t, f.CaptureKey)
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, f.FenceID)
		require.NotEmpty(t, f.Version)
	}
	require.Equal(t, "insert", ins.Op)
	require.Nil(t, ins.OldKey)
	require.Equal(t, str("7"), ins.NewKey)
	require.Equal(t, v1, ins.Version, "the fence carries the version it allocated")
	require.Equal(t, "update", upd.Op)
	require.Equal(t, str("7"), upd.OldKey)
	require.Equal(t, str("7"), upd.NewKey)
	require.Equal(t, "delete", del.Op)
	require.Equal(t, str("7"), del.OldKey)
	require.Nil(t, del.NewKey)
	require.NotEqual(t, ins.Version, upd.Version, "an update of unregistered columns still gets a new version")
	require.NotEqual(t, upd.Version, del.Version)

	var delVersion string
	var deleted bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version, deleted FROM synchro.row_version WHERE relation_id = $1 AND pk = '7'`,
		itemsRel).Scan(&delVersion, &deleted))
	require.Equal(t, del.Version, delVersion)
	require.True(t, deleted)

	// Dependency fences carry the capture key and no client-visible identity.
	for _, f := range fs[3:] {
		require.Equal(t, "capture_dependency", f.Kind)
		require.Equal(t, membersRel, f.RelationID)
		require.Equal(t, "members", f.Table)
		require.Nil(t, f.TableID)
		require.Nil(t, f.PK)
		require.Equal(t, str("m-1"), f.CaptureKey)
	}

	// One random draw per fence (a UUIDv4's 32 hex digits) is the transition version:
	// nothing in it says when or in which order the row was written. The fence_id is in
	// allocation order (a UUIDv8: the registered-DML ordinal as 12 hex digits, version
	// 8, the draw's last 74 bits and its variant), so the ledger's unique index on it
	// grows at its right edge.
	for i, f := range fs {
		require.Regexp(t, `^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$`, f.Version, "a random UUIDv4's hex digits")
		require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, f.FenceID, "UUIDv8 layout")
		hexID := strings.ReplaceAll(f.FenceID, "-", "")
		require.Equal(t, f.Version[13:], hexID[13:], "the fence_id's random bits are the draw's")
		ord, err := strconv.ParseInt(hexID[:12], 16, 64)
		require.NoError(t, err)
		require.Equal(t, f.Ordinal, ord, "the fence_id's first 48 bits are its ordinal")
		if i > 0 {
			require.Greater(t, f.FenceID, fs[i-1].FenceID, "a later fence's id sorts later")
		}
	}

	// Fence ids unique, ordinals strictly increasing in fence order.
	seen := map[string]bool{}
	for i, f := range fs {
		require.False(t, seen[f.FenceID])
		seen[f.FenceID] = true
		if i > 0 {
			require.Greater(t, f.Ordinal, fs[i-1].Ordinal)
		}
	}

	// Wire format 3 (fences parses it strictly: exactly the documented fields), and
	// authenticated: the MAC under the server key over the content before it.
	for _, f := range fs {
		var ok bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT $1 = synchro._message_mac('synchro.fence', $2)`,
			f.MAC, f.Signed).Scan(&ok))
		require.True(t, ok, "fence mac")
	}
}

func TestFenceOnConflict(t *testing.T) {
	t.Parallel()
	db, slot := fenceSetup(t)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 1)`)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 2) ON CONFLICT (id) DO UPDATE SET v = excluded.v`)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 3) ON CONFLICT (id) DO NOTHING`)
	mustExec(t, db, `INSERT INTO items (id, v) VALUES (2, 3) ON CONFLICT (id) DO NOTHING`)
	ds := peek(t, db, slot)
	require.Equal(t, []string{
		"B", "I:items", "M:synchro.fence", "C",
		"B", "U:items", "M:synchro.fence", "C", // DO UPDATE: the update fence only
		// DO NOTHING on a conflict: no fence (and pgoutput skips the empty transaction)
		"B", "I:items", "M:synchro.fence", "C",
	}, events(ds))
	fs := fences(t, ds)
	require.Equal(t, []string{"insert", "update", "insert"}, []string{fs[0].Op, fs[1].Op, fs[2].Op})
}

// Several changes of one row in one transaction, in separate statements, fence in
// order; the runner pairs them by ordinal.
func TestFenceRepeatedChangesInOneTransaction(t *testing.T) {
	t.Parallel()
	db, slot := fenceSetup(t)
	mustExec(t, db, `INSERT INTO items (id) VALUES (1)`)
	mustExec(t, db, `BEGIN;
		UPDATE items SET v = 1 WHERE id = 1;
		UPDATE items SET v = 2 WHERE id = 1;
		DELETE FROM items WHERE id = 1;
		INSERT INTO items (id, v) VALUES (1, 3);
		UPDATE items SET v = 4 WHERE id = 1;
		COMMIT;`)
	fs := fences(t, peek(t, db, slot))
	var ops []string
	for _, f := range fs[1:] {
		ops = append(ops, f.Op)
	}
	require.Equal(t, []string{"update", "update", "delete", "insert", "update"}, ops)
}

// A nested statement that changes a row before the fence of an earlier change of the
// same row fired fails the source transaction with 27000 and leaves nothing behind.
func TestFenceOrderViolation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		trigger string // CREATE TRIGGER clause for nest() on items
		body    string // what nest() does
	}{
		// BEFORE UPDATE of row 2 updates row 1, whose fence is still pending.
		{"BeforeTriggerUpdatesEarlierRow", `BEFORE UPDATE`, `IF NEW.id = 2 THEN UPDATE public.items SET v = v + 100 WHERE id = 1; END IF; RETURN NEW;`},
		// AFTER UPDATE of row 1 (fires before the fences, by trigger name) updates row 2,
		// whose own fence is still queued.
		{"AfterTriggerUpdatesLaterRow", `AFTER UPDATE`, `IF NEW.id = 1 THEN UPDATE public.items SET v = v + 100 WHERE id = 2; END IF; RETURN NULL;`},
		// AFTER UPDATE of row 1 deletes row 2: row 2's update fence finds no live tuple.
		{"AfterTriggerDeletesLaterRow", `AFTER UPDATE`, `IF NEW.id = 1 THEN DELETE FROM public.items WHERE id = 2; END IF; RETURN NULL;`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, slot := fenceSetup(t)
			mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0), (2, 0)`)
			mustExec(t, db, `CREATE FUNCTION nest() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN `+tc.body+` END $$;
				CREATE TRIGGER a_nest `+tc.trigger+` ON items FOR EACH ROW EXECUTE FUNCTION nest();`)
			before := len(peek(t, db, slot))
			_, err := db.Pool.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id IN (1, 2)`)
			pgErr := requireSQLState(t, err, "27000")
			require.Contains(t, pgErr.Message, "fence order violation")
			var n, sum int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), sum(v) FROM items`).Scan(&n, &sum))
			require.Equal(t, 2, n, "nothing changed")
			require.Zero(t, sum, "nothing changed")
			require.Equal(t, before, len(peek(t, db, slot)), "nothing reached the WAL stream")
		})
	}

	// An AFTER INSERT trigger that updates the row just inserted: the nested update's
	// fence fires before the insert's fence.
	t.Run("AfterInsertTriggerUpdatesSameRow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db, slot := fenceSetup(t)
		mustExec(t, db, `CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN UPDATE public.items SET v = 1 WHERE id = NEW.id; RETURN NULL; END $$;
			CREATE TRIGGER a_touch AFTER INSERT ON items FOR EACH ROW EXECUTE FUNCTION touch();`)
		_, err := db.Pool.Exec(ctx, `INSERT INTO items (id) VALUES (5)`)
		requireSQLState(t, err, "27000")
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&n))
		require.Zero(t, n)
		require.Empty(t, fences(t, peek(t, db, slot)))
	})

	// A function in the SET list updates an earlier row of the same statement: no
	// trigger encloses the nested statement (pg_trigger_depth() is 1 in its fence), yet
	// its fence fires before the outer statement's. The fence's fast path (no probe)
	// is only for fences a top-level statement fires; this one is nested.
	t.Run("FunctionInSetListUpdatesEarlierRow", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db, slot := fenceSetup(t)
		mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0), (2, 0)`)
		mustExec(t, db, `CREATE FUNCTION bump(i int8) RETURNS int LANGUAGE sql AS $$
			UPDATE public.items SET v = v + 100 WHERE id = 1 AND i = 2 RETURNING 0 $$;`)
		before := len(peek(t, db, slot))
		_, err := db.Pool.Exec(ctx, `UPDATE items SET v = coalesce(bump(id), 0) + 1 WHERE id IN (1, 2)`)
		requireSQLState(t, err, "27000")
		var sum int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT sum(v) FROM items`).Scan(&sum))
		require.Zero(t, sum, "nothing changed")
		require.Equal(t, before, len(peek(t, db, slot)), "nothing reached the WAL stream")
	})

	// A delete, then a nested re-insert of the same key before the delete's fence.
	t.Run("NestedReinsertAfterDelete", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db, slot := fenceSetup(t)
		mustExec(t, db, `INSERT INTO items (id, v) VALUES (1, 0), (2, 0)`)
		mustExec(t, db, `CREATE FUNCTION reinsert() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF OLD.id = 2 THEN INSERT INTO public.items (id, v) VALUES (1, 9); END IF; RETURN OLD; END $$;
			CREATE TRIGGER a_reinsert BEFORE DELETE ON items FOR EACH ROW EXECUTE FUNCTION reinsert();`)
		_, err := db.Pool.Exec(ctx, `DELETE FROM items WHERE id IN (1, 2)`)
		requireSQLState(t, err, "27000")
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&n))
		require.Equal(t, 2, n)
		require.Len(t, fences(t, peek(t, db, slot)), 2, "only the setup inserts")
	})
}

func TestSourceGuards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("PrimaryKeyChange", func(t *testing.T) {
		t.Parallel()
		db, _ := fenceSetup(t)
		mustExec(t, db, `INSERT INTO items (id) VALUES (1)`)
		_, err := db.Pool.Exec(ctx, `UPDATE items SET id = 2 WHERE id = 1`)
		requireSQLState(t, err, "0A000")
		// A BEFORE trigger named to run after the guard changes the key: the fence refuses.
		mustExec(t, db, `CREATE FUNCTION rekey() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN NEW.id := NEW.id + 100; RETURN NEW; END $$;
			CREATE TRIGGER zz_rekey BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION rekey();`)
		_, err = db.Pool.Exec(ctx, `UPDATE items SET v = 5 WHERE id = 1`)
		requireSQLState(t, err, "0A000")
		var id int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT id FROM items`).Scan(&id))
		require.EqualValues(t, 1, id)
	})

	t.Run("Truncate", func(t *testing.T) {
		t.Parallel()
		db, _ := fenceSetup(t)
		mustExec(t, db, `INSERT INTO items (id) VALUES (1)`)
		_, err := db.Pool.Exec(ctx, `TRUNCATE items`)
		requireSQLState(t, err, "0A000")
		_, err = db.Pool.Exec(ctx, `TRUNCATE members`)
		requireSQLState(t, err, "0A000")
	})

	t.Run("CopyFreeze", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		// COPY FREEZE is possible only in the transaction that created the table.
		_, err = conn.Exec(ctx, `BEGIN;
			CREATE TABLE fz (id int8 PRIMARY KEY);
			SELECT synchro.register_table('fz', 'fz');
			SELECT synchro.activate_registry();`)
		require.NoError(t, err)
		_, err = conn.Conn().PgConn().CopyFrom(ctx, stringsReader("1\n2\n"), `COPY fz FROM STDIN WITH (FREEZE)`)
		requireSQLState(t, err, "0A000")
		_, err = conn.Exec(ctx, `ROLLBACK`)
		require.NoError(t, err)

		// Plain COPY (and COPY without FREEZE in the creating transaction) works.
		_, err = conn.Exec(ctx, `BEGIN;
			CREATE TABLE fz (id int8 PRIMARY KEY);
			SELECT synchro.register_table('fz', 'fz');
			SELECT synchro.activate_registry();`)
		require.NoError(t, err)
		tag, err := conn.Conn().PgConn().CopyFrom(ctx, stringsReader("1\n2\n"), `COPY fz FROM STDIN`)
		require.NoError(t, err)
		require.EqualValues(t, 2, tag.RowsAffected())
		_, err = conn.Exec(ctx, `COMMIT`)
		require.NoError(t, err)
	})

	// A fence inside a rolled-back savepoint leaves no message and no version.
	t.Run("RolledBackSavepoint", func(t *testing.T) {
		t.Parallel()
		db, slot := fenceSetup(t)
		mustExec(t, db, `BEGIN;
			INSERT INTO items (id) VALUES (1);
			SAVEPOINT s; INSERT INTO items (id) VALUES (2); ROLLBACK TO SAVEPOINT s;
			COMMIT;`)
		fs := fences(t, peek(t, db, slot))
		require.Len(t, fs, 1)
		require.Equal(t, str("1"), fs[0].NewKey)
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.row_version WHERE pk = '2'`).Scan(&n))
		require.Zero(t, n)
	})
}

// A text key under a nondeterministic collation: 'a' and 'A' are equal to PostgreSQL
// (case-insensitive ICU), so the key guard's WHEN clause sees no change in
// UPDATE ... SET id = 'A', yet the key's bytes, its identity in the stream, changed:
// the update committed and its transaction was quarantined (found in the twelfth
// session). The fence compares the key byte for byte and refuses it (0A000).
func TestFenceRefusesKeyChangeUnderNondeterministicCollation(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(context.Background(),
		`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`); err != nil {
		// The version matrix's PostgreSQL 16-18 packages may be built without ICU.
		t.Skipf("no ICU collation on this server: %v", err)
	}
	// Registration refuses such a key (TestPushNondeterministicKeyRefused); a key column
	// given the collation after registration (before activation: the fence's key guard
	// forbids it afterwards) still meets the fence.
	mustExec(t, db, `
		CREATE TABLE docs (id text PRIMARY KEY, team text);
		SELECT synchro.register_table('docs', 'docs');
		SELECT synchro.add_scope_rule('docs', 'team:', 'team');
		ALTER TABLE docs ALTER COLUMN id TYPE text COLLATE ci;
		SELECT synchro.activate_registry();`)
	rr := startRunner(t, testRunnerConfig(t, db))
	defer func() { require.NoError(t, rr.stop(t)) }()
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO docs VALUES ('a', 'x')`)
	_, err := db.Pool.Exec(context.Background(), `UPDATE docs SET id = 'A' WHERE id = 'a'`)
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "0A000", pe.Code, pe.Message)
	// The same key in the same case, and another column, still update.
	mustExec(t, db, `UPDATE docs SET id = 'a', team = 'y' WHERE id = 'A'`)
	got := waitEffects(t, db, 3)
	require.Equal(t, []string{"a upsert team:x", "a delete team:x", "a upsert team:y"},
		[]string{got[0].PK + " " + got[0].Op + " " + got[0].Scope, got[1].PK + " " + got[1].Op + " " + got[1].Scope,
			got[2].PK + " " + got[2].Op + " " + got[2].Scope})
	require.Empty(t, quarantines(t, db))
}

package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Push edge cases from an independent review (2026-12-04, second pass). Six were bugs,
// each red before its fix: a column named t, a NOT NULL domain column left out, a row
// visible but not lockable under row-level security, a varchar(n) key with trailing
// spaces, a nondeterministic key collation, and a GENERATED ALWAYS column named by a
// mutation. The others pin scenarios that were checked and hold.

// rp2Role creates a LOGIN role in synchro_app with a random name, dropped at cleanup.
func rp2Role(t *testing.T, e *pushEnv, prefix string) (name, ident string) {
	t.Helper()
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name = prefix + "_" + hex.EncodeToString(suffix[:])
	ident = pgx.Identifier{name}.Sanitize()
	e.exec(`CREATE ROLE ` + ident + ` LOGIN IN ROLE synchro_app`)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = e.db.Pool.Exec(ctx, `DROP OWNED BY `+ident)
		_, _ = e.db.Pool.Exec(ctx, `DROP ROLE `+ident)
	})
	return name, ident
}

// rp2As acquires a connection that runs as role (SET ROLE), reset at cleanup.
func rp2As(t *testing.T, e *pushEnv, ident string) *pgxpool.Conn {
	t.Helper()
	conn, err := e.db.Pool.Acquire(e.ctx)
	require.NoError(t, err)
	_, err = conn.Exec(e.ctx, `SET ROLE `+ident)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), `RESET ROLE`)
		conn.Release()
	})
	return conn
}

func rp2Status(t *testing.T, o pushOut) string {
	t.Helper()
	return o.str(t, "status")
}

// Docs (push.md, Notes): "A row hidden from the caller by row-level security looks
// absent (conflict with nulls); a row visible but not updatable/deletable under the
// policies is rejected 42501." A row the caller's SELECT policy shows but whose UPDATE
// policy refuses is visible: an update of it must be rejected 42501, not reported as
// an absent row. (Push's FOR UPDATE read applies the UPDATE policies; it reported such
// a row absent.)
func TestPushRowVisibleButNotUpdatable(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.memo (id int4 PRIMARY KEY, owner text NOT NULL, body text);
		ALTER TABLE public.memo ENABLE ROW LEVEL SECURITY;
		CREATE POLICY memo_read ON public.memo FOR SELECT USING (true);
		CREATE POLICY memo_ins ON public.memo FOR INSERT WITH CHECK (true);
		CREATE POLICY memo_upd ON public.memo FOR UPDATE USING (owner = current_user);
		CREATE POLICY memo_del ON public.memo FOR DELETE USING (true);
		SELECT synchro.register_table('public.memo', 'memo');
		SELECT synchro.activate_registry();
		INSERT INTO public.memo VALUES (1, 'someone_else', 'theirs'), (2, 'someone_else', 'theirs too');`)
	_, ident := rp2Role(t, e, "rp2_rls")
	e.exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON public.memo TO ` + ident)
	v1, v2 := e.version("memo", "1"), e.version("memo", "2")
	conn := rp2As(t, e, ident)

	// The caller sees the row.
	var n int
	require.NoError(t, conn.QueryRow(e.ctx, `SELECT count(*) FROM public.memo WHERE id = 1`).Scan(&n))
	require.Equal(t, 1, n, "the row is visible to the caller")

	idU, idD := pushID(), pushID()
	raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t,
		pushUpd(idU, "memo", 1, v1, pm{"body": "mine now"}),
		pushDel(idD, "memo", 2, v2)))
	require.NoError(t, err)
	res := pushParse(t, raw)
	t.Logf("outcomes: %s", raw)
	// The row is unchanged either way.
	require.Equal(t, 1, e.count(`SELECT count(*) FROM public.memo WHERE id = 1 AND body = 'theirs'`))
	require.Equal(t, "rejected", rp2Status(t, res[0]),
		"update of a visible row that the UPDATE policy refuses: want rejected 42501 (docs/sql/push.md), got %s", raw)
	pushRejected(t, res[0], idU, "42501")
	// The delete: visible and deletable by the DELETE policy; the lock (FOR UPDATE) is
	// refused by the UPDATE policy. Not absent in any case.
	require.NotEqual(t, `null`, string(res[1]["version"]),
		"a visible row must not be reported absent (version null): %s", raw)
}

// A varchar(n) key: PostgreSQL silently cuts trailing spaces past n on input, so the
// row is stored under another key text than the one the mutation names. The mutation
// is the client's own; it must get an outcome (accepted or rejected), never a
// whole-call failure that every retry repeats (the client's outbox stuck for ever). It
// failed with 55000; it is rejected 22001 now, like a key that is too long.
func TestPushVarcharKeyTrailingSpaces(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.codes (code varchar(3) PRIMARY KEY, n int4);
		SELECT synchro.register_table('public.codes', 'codes');
		SELECT synchro.activate_registry();`)
	id, other := pushID(), pushID()
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
		pushIns(other, "codes", "ok", pm{"n": 1}),
		pushIns(id, "codes", "abc  ", pm{"n": 2})))
	require.NoError(t, err, "a mutation's own key must not fail the whole call (retries fail the same way for ever)")
	res := pushParse(t, raw)
	pushAccepted(t, res[0], other, true)
	st := rp2Status(t, res[1])
	require.Contains(t, []string{"accepted", "rejected"}, st)
}

// Identity GENERATED ALWAYS: registration accepts it (a table only the application
// inserts into still syncs); a push naming such a column, the key of an insert
// included, is SY400 (a bad mutation shape). It failed the whole call with 428C9, every
// retry alike (found by review).
func TestPushEdgeIdentityAlwaysColumn(t *testing.T) {
	t.Parallel()
	t.Run("Key", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		_, err := e.db.Pool.Exec(e.ctx, `
			CREATE TABLE public.seqd (id int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY, body text);
			SELECT synchro.register_table('public.seqd', 'seqd');
			SELECT synchro.activate_registry();`)
		if err != nil {
			t.Logf("registration refused an identity ALWAYS key: %v", err)
			return
		}
		id, other := pushID(), pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushIns(other, "tags", "ok", pm{"n": 1}),
			pushIns(id, "seqd", 5, pm{"body": "b"})))
		requireSQLState(t, err, "SY400")
		t.Logf("%s", raw)
	})
	t.Run("NonKey", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`
			CREATE TABLE public.seqc (id int4 PRIMARY KEY, ord int8 GENERATED ALWAYS AS IDENTITY, body text);
			SELECT synchro.register_table('public.seqc', 'seqc');
			SELECT synchro.activate_registry();`)
		id, other := pushID(), pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushIns(other, "tags", "ok", pm{"n": 1}),
			pushIns(id, "seqc", 1, pm{"ord": 5, "body": "b"})))
		requireSQLState(t, err, "SY400")
		t.Logf("%s", raw)
	})
}

// Values of arrays, composites, domains and enums in row: written as given, refused as
// rejections with value-free reasons.
func TestPushEdgeRichRowValues(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE DOMAIN public.pos AS int4 CONSTRAINT pos_check CHECK (VALUE > 0);
		CREATE DOMAIN public.nn AS text NOT NULL;
		CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TABLE public.rich (
		  id int4 PRIMARY KEY, arr int4[], grid text[][], d public.pos, m public.mood,
		  nn public.nn DEFAULT 'x', j jsonb, dates date[]);
		SELECT synchro.register_table('public.rich', 'rich');
		SELECT synchro.activate_registry();`)
	id := pushID()
	res := e.push("c1", pushJSON(t, pushIns(id, "rich", 1, pm{
		"arr": []int{1, 2, 3}, "grid": [][]string{{"a", "b"}, {"c", "d"}},
		"d": 5, "m": "happy", "nn": "x", "j": pm{"a": []any{1, "b", nil}}, "dates": []string{"2024-01-02"},
	})))
	pushAccepted(t, res[0], id, true)
	require.JSONEq(t, `{"id":1,"arr":[1,2,3],"grid":[["a","b"],["c","d"]],"d":5,"m":"happy","nn":"x",
		"j":{"a":[1,"b",null]},"dates":["2024-01-02"]}`, string(res[0]["row"]))

	cases := []struct {
		name string
		row  pm
		code string
	}{
		{"DomainCheck", pm{"d": -424242}, "23514"},
		{"DomainNotNull", pm{"nn": nil, "d": 1}, "23502"},
		{"BadEnum", pm{"m": "zz-secret-label"}, "22P02"},
		{"BadArrayElement", pm{"arr": []any{1, "zz-secret-elem"}}, "22P02"},
		{"ArrayNotArray", pm{"arr": 424243}, ""},
		{"RaggedArray", pm{"grid": []any{[]string{"a"}, []string{"b", "c"}}}, ""},
		{"BadDateInArray", pm{"dates": []string{"2024-02-30"}}, ""},
		{"ObjectForArray", pm{"arr": pm{"zz-secret-k": 1}}, ""},
	}
	for i, tc := range cases {
		mid := pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushUpd(mid, "rich", 1, e.version("rich", "1"), tc.row)))
		require.NoError(t, err, "case %s: a bad value is this mutation's fault: rejected, not a whole-call failure", tc.name)
		out := pushParse(t, raw)[0]
		require.Equal(t, "rejected", rp2Status(t, out), "case %s: %s", tc.name, raw)
		if tc.code != "" {
			require.Equal(t, tc.code, out.str(t, "code"), "case %s", tc.name)
		}
		require.NotContains(t, raw, "zz-secret", "case %s", tc.name)
		require.NotContains(t, raw, "42424", "case %s", tc.name)
		_ = i
	}
}

// Deeply nested JSON in a registered jsonb column: the fence refuses over 8,000 levels
// with 22001 (a rejection). Push itself must get there without failing the call
// (stack depth, 54001) below what the caller could pass in.
func TestPushEdgeDeepJSON(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.deep (id int4 PRIMARY KEY, j jsonb, txt text);
		SELECT synchro.register_table('public.deep', 'deep');
		SELECT synchro.activate_registry();`)
	nest := func(n int) string { return strings.Repeat("[", n) + "1" + strings.Repeat("]", n) }
	for _, depth := range []int{7990, 8500, 9500} {
		for _, col := range []string{"j", "txt"} {
			id := pushID()
			call := fmt.Sprintf(`[{"id": %q, "table": "deep", "op": "insert", "pk": %d, "row": {%q: %s}}]`, id, depth*10+int(col[0]-'a'), col, nest(depth))
			raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
			if err != nil {
				// The caller's own jsonb parse may refuse the input: then it is not push's.
				var ok bool
				require.NoError(t, e.db.Pool.QueryRow(e.ctx, `SELECT $1::jsonb IS NOT NULL`, call).Scan(&ok))
				require.NoError(t, err, "depth %d col %s: the input parses as jsonb, push fails the whole call", depth, col)
			}
			out := pushParse(t, raw)[0]
			st := rp2Status(t, out)
			t.Logf("depth %d col %s: %s %.300s", depth, col, st, raw)
			if col == "j" && depth > 8000 {
				require.Equal(t, "rejected", st)
				require.Equal(t, "22001", out.str(t, "code"))
			} else {
				require.Equal(t, "accepted", st)
			}
		}
	}
}

// Integer keys in every spelling JSON allows name one row, and a replay spelled
// another way replays.
func TestPushEdgeIntKeySpellings(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	id := pushID()
	first, err := pushRawOn(e.ctx, e.db.Pool, "c1",
		`[{"id": "`+id+`", "table": "items", "op": "insert", "pk": 1e3, "row": {"name": "k", "id": 1000.00}}]`)
	require.NoError(t, err)
	pushAccepted(t, pushParse(t, first)[0], id, true)
	require.True(t, e.itemExists(1000))
	for _, spelled := range []string{"1000", "1000.0", "1E3", "10e2", "1000.000e0"} {
		again, err := pushRawOn(e.ctx, e.db.Pool, "c1",
			`[{"id": "`+id+`", "table": "items", "op": "insert", "pk": `+spelled+`, "row": {"name": "k", "id": 1000.00}}]`)
		require.NoError(t, err, spelled)
		require.Equal(t, first, again, spelled)
	}
	// -0 is 0.
	id0 := pushID()
	res := e.push("c1", `[{"id": "`+id0+`", "table": "items", "op": "insert", "pk": -0, "row": {"name": "zero"}}]`)
	v := pushAccepted(t, res[0], id0, true)
	e.requireFence("c1", id0, "items", "0", "insert", v)
	// int64 bounds.
	idMax, idMin := pushID(), pushID()
	res = e.push("c1", `[{"id": "`+idMax+`", "table": "children", "op": "insert", "pk": 9223372036854775807},
		{"id": "`+idMin+`", "table": "children", "op": "insert", "pk": -9223372036854775808}]`)
	pushAccepted(t, res[0], idMax, true)
	pushAccepted(t, res[1], idMin, true)
	for _, bad := range []string{"9223372036854775808", "-9223372036854775809", "1e19", "1.5", "1e-1", `"1"`, "true", "null"} {
		e.pushFails(e.db.Pool, "c1", `[{"id": "`+pushID()+`", "table": "children", "op": "insert", "pk": `+bad+`}]`, "SY400")
	}
}

// Duplicate object keys: jsonb keeps the last. The content recorded is that jsonb, and
// a replay of the same text replays.
func TestPushEdgeDuplicateJSONKeys(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	id := pushID()
	call := `[{"id": "` + id + `", "table": "tags", "op": "delete", "op": "insert", "pk": "x", "pk": "y", "row": {"n": 1, "n": 2}}]`
	first, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
	require.NoError(t, err)
	out := pushParse(t, first)[0]
	pushAccepted(t, out, id, true)
	require.JSONEq(t, `{"name": "y", "n": 2}`, string(out["row"]))
	again, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
	require.NoError(t, err)
	require.Equal(t, first, again)
	// The same content without the duplicates is the same content.
	again, err = pushRawOn(e.ctx, e.db.Pool, "c1", `[{"pk":"y","row":{"n":2},"op":"insert","table":"tags","id":"`+strings.ToUpper(id)+`"}]`)
	require.NoError(t, err)
	require.Equal(t, first, again)
}

// "Same content is the mutation object as canonical jsonb": jsonb considers 1 and 1.0
// equal (numeric equality), but its text keeps the scale.
func TestPushEdgeNumericScaleInRowIsContent(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	id := pushID()
	first, err := pushRawOn(e.ctx, e.db.Pool, "c1", `[{"id": "`+id+`", "table": "tags", "op": "insert", "pk": "s", "row": {"n": 2}}]`)
	require.NoError(t, err)
	var eq bool
	require.NoError(t, e.db.Pool.QueryRow(e.ctx, `SELECT '{"n": 2}'::jsonb = '{"n": 2.0}'::jsonb`).Scan(&eq))
	t.Logf("jsonb equality of 2 and 2.0: %v", eq)
	again, err := pushRawOn(e.ctx, e.db.Pool, "c1", `[{"id": "`+id+`", "table": "tags", "op": "insert", "pk": "s", "row": {"n": 2.0}}]`)
	if err != nil {
		t.Logf("row value 2.0 after 2: %v", err)
	} else {
		require.Equal(t, first, again)
	}
}

// Push in the caller's transaction: rolled back, nothing is recorded and a retry applies
// afresh; twice in one transaction, the second call replays the first's outcome and a
// chained update on the first's version is accepted; the caller's other writes commit
// with it.
func TestPushEdgeCallerTransaction(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	id := pushID()
	call := pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1}))

	tx, err := e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	raw, err := pushRawOn(e.ctx, tx, "c1", call)
	require.NoError(t, err)
	pushAccepted(t, pushParse(t, raw)[0], id, true)
	require.NoError(t, tx.Rollback(e.ctx))
	require.Zero(t, e.count(`SELECT count(*) FROM synchro.mutation_outcome`))
	require.Zero(t, e.count(`SELECT count(*) FROM synchro.write_fence`))
	require.Zero(t, e.count(`SELECT count(*) FROM public.tags`))

	tx, err = e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `INSERT INTO public.items (id, name) VALUES (1, 'direct')`)
	require.NoError(t, err)
	raw1, err := pushRawOn(e.ctx, tx, "c1", call)
	require.NoError(t, err)
	v := pushAccepted(t, pushParse(t, raw1)[0], id, true)
	raw2, err := pushRawOn(e.ctx, tx, "c1", call)
	require.NoError(t, err)
	require.Equal(t, raw1, raw2, "second call in one transaction replays")
	id2 := pushID()
	raw3, err := pushRawOn(e.ctx, tx, "c1", pushJSON(t, pushUpd(id2, "tags", "a", v, pm{"n": 2})))
	require.NoError(t, err)
	v2 := pushAccepted(t, pushParse(t, raw3)[0], id2, true)
	// The direct row of this transaction, updated by push with its version.
	var vi string
	require.NoError(t, tx.QueryRow(e.ctx, `SELECT rv.version FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
		WHERE r.table_id = 'items' AND rv.pk = '1'`).Scan(&vi))
	id3 := pushID()
	raw4, err := pushRawOn(e.ctx, tx, "c1", pushJSON(t, pushUpd(id3, "items", 1, vi, pm{"name": "pushed"})))
	require.NoError(t, err)
	v3 := pushAccepted(t, pushParse(t, raw4)[0], id3, true)
	require.NoError(t, tx.Commit(e.ctx))
	e.requireFence("c1", id, "tags", "a", "insert", v)
	e.requireFence("c1", id2, "tags", "a", "update", v2)
	e.requireFence("c1", id3, "items", "1", "update", v3)
	require.Equal(t, v2, e.version("tags", "a"))
	require.Equal(t, v3, e.version("items", "1"))
	e.requireNoPushContext()
}

// A key column with a nondeterministic collation: other texts name the same row ('abc'
// and 'ABC'), and push found the row but not its identity reservation (a conflict with
// a row and a null version; an update with the right version could never be accepted).
// Found by review; registration now refuses such a key (SY400).
func TestPushNondeterministicKeyRefused(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	_, err := e.db.Pool.Exec(e.ctx, `CREATE COLLATION public.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	if err != nil {
		t.Skipf("no ICU: %v", err)
	}
	e.exec(`CREATE TABLE public.names (name text COLLATE public.ci PRIMARY KEY, n int4)`)
	_, err = e.db.Pool.Exec(e.ctx, `SELECT synchro.register_table('public.names', 'names')`)
	requireSQLState(t, err, "SY400")
}

// Outcomes after retention: retire_client makes the id SY409; an outcome compacted by
// outcome_retention is applied as a new mutation (documented).
func TestPushEdgeRetentionAndRetire(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	id := pushID()
	call := pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1}))
	first := e.push("c1", call)
	pushAccepted(t, first[0], id, true)

	// The same id from another client is another mutation.
	res := e.push("c2", call)
	pushConflict(t, res[0], id, e.version("tags", "a"))

	e.exec(`UPDATE synchro.setting SET value = '1 second' WHERE name = 'outcome_retention'`)
	e.exec(`UPDATE synchro.mutation_outcome SET decided_at = now() - interval '1 hour' WHERE client_id = 'c1'`)
	var out string
	require.NoError(t, e.db.Pool.QueryRow(e.ctx, `SELECT synchro.compact('7 days')::text`).Scan(&out))
	t.Logf("compact: %s", out)
	require.Zero(t, e.count(`SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'c1'`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'c2'`))
	res = e.push("c1", call)
	pushConflict(t, res[0], id, e.version("tags", "a"))

	var ret string
	require.NoError(t, e.db.Pool.QueryRow(e.ctx, `SELECT synchro.retire_client('c2')::text`).Scan(&ret))
	e.pushFails(e.db.Pool, "c2", call, "SY409")
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c2", call)
	require.Error(t, err)
	require.Empty(t, raw)
	_ = json.Valid
}

// SELECT only: every write is a rejection 42501, nothing written, no version leaks
// beyond what the caller may read.
func TestPushEdgeSelectOnly(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	_, ident := rp2Role(t, e, "rp2_ro")
	e.exec(`GRANT SELECT ON public.items TO ` + ident)
	e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha'), (2, 'beta')`)
	v1, v2 := e.version("items", "1"), e.version("items", "2")
	conn := rp2As(t, e, ident)
	before := e.state(false)
	ids := []string{pushID(), pushID(), pushID(), pushID()}
	raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t,
		pushIns(ids[0], "items", 3, pm{"name": "three"}),
		pushUpd(ids[1], "items", 1, v1, pm{"name": "x"}),
		pushDel(ids[2], "items", 2, v2),
		pushIns(ids[3], "items", 1, pm{"name": "dup"}),
	))
	require.NoError(t, err)
	res := pushParse(t, raw)
	pushRejected(t, res[0], ids[0], "42501")
	pushRejected(t, res[1], ids[1], "42501")
	pushRejected(t, res[2], ids[2], "42501")
	// An insert of an existing key: the caller can read it, so a conflict with it.
	pushConflict(t, res[3], ids[3], v1)
	require.Equal(t, before, e.state(false))
}

// An application trigger on the pushed table writes another registered table: the
// outcome and the write fence are the mutation's row only; a rejection of the
// mutation undoes the trigger's write too; a deferred FK violated by the trigger's
// write lands on that mutation (checked at its end).
func TestPushEdgeTriggerWritesOtherRegisteredTable(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE FUNCTION public.tags_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO public.children (id, item_id) VALUES (NEW.n, NEW.n);
		  RETURN NULL;
		END $$;
		CREATE TRIGGER tags_audit AFTER INSERT ON public.tags FOR EACH ROW EXECUTE FUNCTION public.tags_audit();
		INSERT INTO public.items (id, name) VALUES (1, 'one');`)
	ids := []string{pushID(), pushID(), pushID()}
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
		pushIns(ids[0], "tags", "a", pm{"n": 1}),
		pushIns(ids[1], "tags", "b", pm{"n": 424242}), // child 424242 -> item 424242: FK violated
		pushIns(ids[2], "tags", "c", pm{"n": 1}),      // child 1 exists: unique violation
	))
	require.NoError(t, err)
	res := pushParse(t, raw)
	v0 := pushAccepted(t, res[0], ids[0], true)
	reason := pushRejected(t, res[1], ids[1], "23503")
	require.Contains(t, reason, "children_item_fk")
	pushRejected(t, res[2], ids[2], "23505")
	e.requireFence("c1", ids[0], "tags", "a", "insert", v0)
	e.requireNoFence("c1", ids[1])
	e.requireNoFence("c1", ids[2])
	require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.write_fence`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM public.children`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM public.tags`))
	require.NotEmpty(t, e.version("children", "1"))
	require.Empty(t, e.version("children", "424242"))
	e.requireNoPushContext()
}

// The caller's own write earlier in its transaction violates an INITIALLY DEFERRED
// constraint: push (SET CONSTRAINTS ALL IMMEDIATE) must not attribute it to a
// mutation and record a rejection; the call fails and nothing is recorded.
func TestPushEdgeCallerDeferredViolationBeforePush(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	tx, err := e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `INSERT INTO public.children (id, item_id) VALUES (1, 999)`)
	require.NoError(t, err)
	id := pushID()
	raw, err := pushRawOn(e.ctx, tx, "c1", pushJSON(t, pushIns(id, "tags", "x", pm{"n": 1})))
	t.Logf("push after the caller's deferred violation: %s %v", raw, err)
	if err == nil {
		// Then the outcome must not be a rejection for the caller's violation.
		out := pushParse(t, raw)[0]
		require.Equal(t, "accepted", rp2Status(t, out))
	}
}

// 1000 mutations of every outcome kind, then the same call again: byte for byte.
func TestPushEdgeThousandMixedReplay(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`INSERT INTO public.items (id, name) SELECT g, 'n' || g FROM generate_series(1, 250) g`)
	ms := make([]any, 0, 1000)
	for i := 0; i < 1000; i++ {
		switch i % 4 {
		case 0:
			ms = append(ms, pushIns(pushID(), "items", 1000+i, pm{"name": fmt.Sprintf("new%d", i)}))
		case 1:
			ms = append(ms, pushUpd(pushID(), "items", 1+i/4, "00000000000000000000000000000000", pm{"qty": 1}))
		case 2:
			ms = append(ms, pushIns(pushID(), "items", 5000+i, pm{"name": "bad", "qty": -1}))
		default:
			k := 1 + i/4
			ms = append(ms, pushUpd(pushID(), "items", k, e.version("items", fmt.Sprint(k)), pm{"qty": 2}))
		}
	}
	call := pushJSON(t, ms...)
	first, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
	require.NoError(t, err)
	res := pushParse(t, first)
	require.Len(t, res, 1000)
	counts := map[string]int{}
	for _, o := range res {
		counts[rp2Status(t, o)]++
	}
	require.Equal(t, map[string]int{"accepted": 500, "conflict": 250, "rejected": 250}, counts)
	state := e.state(true)
	again, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
	require.NoError(t, err)
	require.Equal(t, first, again)
	require.Equal(t, state, e.state(true))
}

// A registered table with a column named "t": push's statements alias the table "t"
// and rendered the row with to_jsonb(t), which PostgreSQL resolves to the column t, not
// the row (to_jsonb(t.* ) now). An insert is written (row, version, write fence) while its outcome says
// "conflict" with version and row null (the row absent); an insert or update giving t
// a value is rejected 22023 (jsonb_each of a string).
func TestPushColumnNamedT(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.notes (id int4 PRIMARY KEY, t text, body text);
		SELECT synchro.register_table('public.notes', 'notes');
		SELECT synchro.activate_registry();
		INSERT INTO public.notes VALUES (10, 'ten', 'b');`)

	t.Run("InsertWithoutT", func(t *testing.T) {
		id := pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(id, "notes", 1, pm{"body": "hello"})))
		require.NoError(t, err)
		out := pushParse(t, raw)[0]
		written := e.count(`SELECT count(*) FROM public.notes WHERE id = 1`)
		fences := e.count(`SELECT count(*) FROM synchro.write_fence WHERE mutation_id = $1`, id)
		t.Logf("outcome %s; row written: %d; write fences: %d", raw, written, fences)
		require.Equal(t, "accepted", rp2Status(t, out), "the row was written (%d) with a write fence (%d), the outcome says: %s", written, fences, raw)
		require.JSONEq(t, `{"id": 1, "t": null, "body": "hello"}`, string(out["row"]))
	})
	t.Run("InsertWithT", func(t *testing.T) {
		id := pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(id, "notes", 2, pm{"t": "x", "body": "hello"})))
		require.NoError(t, err)
		out := pushParse(t, raw)[0]
		require.Equal(t, "accepted", rp2Status(t, out), "a valid insert: %s", raw)
	})
	t.Run("UpdateExisting", func(t *testing.T) {
		id := pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushUpd(id, "notes", 10, e.version("notes", "10"), pm{"body": "new"})))
		require.NoError(t, err)
		out := pushParse(t, raw)[0]
		require.Equal(t, "accepted", rp2Status(t, out), "a valid update with the current version: %s", raw)
	})
}

// A column whose domain is NOT NULL and which has a default: docs/sql/push.md says the
// columns of an insert's row are "the columns to set on insert (others take their
// defaults)", and an update sets "the changed columns". Push builds both from
// jsonb_populate_record(NULL::table, row), which checked every domain column absent
// from row against NULL: an insert omitting it, and every update not naming it, was
// rejected 23502 although a plain INSERT/UPDATE succeeds (jsonb_to_record over the
// named columns now).
func TestPushNotNullDomainColumn(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE DOMAIN public.label AS text NOT NULL;
		CREATE TABLE public.labelled (id int4 PRIMARY KEY, lbl public.label DEFAULT 'none', body text);
		SELECT synchro.register_table('public.labelled', 'labelled');
		SELECT synchro.activate_registry();
		INSERT INTO public.labelled (id, body) VALUES (1, 'direct');  -- the default applies
		UPDATE public.labelled SET body = 'direct update' WHERE id = 1;`)
	idI, idU := pushID(), pushID()
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
		pushIns(idI, "labelled", 2, pm{"body": "pushed"}),
		pushUpd(idU, "labelled", 1, e.version("labelled", "1"), pm{"body": "pushed update"})))
	require.NoError(t, err)
	t.Logf("%s", raw)
	res := pushParse(t, raw)
	require.Equal(t, "accepted", rp2Status(t, res[0]), "insert omitting a column with a default: %s", raw)
	require.Equal(t, "accepted", rp2Status(t, res[1]), "update not naming the domain column: %s", raw)
}

// SY503: an accepted push to a table that is unregistered before the runner captured
// the push (the table held no rows to bootstrap, so no projection bootstrap is
// involved). Its transaction committed while the table was registered, so it is
// materialized under that registry and the fence covered: the client is served.
func TestPushEdgeCapturePendingAfterUnregister(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `GRANT SELECT ON notes TO synchro_operator;`)
	db := e.db
	ctx := context.Background()
	e.stopRunner(t)
	raw, err := pushRawOn(ctx, db.Pool, "pusher", pushJSON(t, pushIns(pushID(), "notes", "n1", pm{"owner": "o1", "body": "pushed"})))
	require.NoError(t, err)
	require.Contains(t, raw, `"accepted"`)
	_, err = rebuildRaw(db, "pusher", "owner:o1", "", 100)
	requireSQLState(t, err, "SY503")

	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, relationID(t, db, "notes")))
	g2 := op.activate(t)
	e.startRunner(t)
	waitRegistry(t, db, g2)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (1, 'o1', 'one')`)

	var last error
	for i := 0; i < 100; i++ {
		_, last = rebuildRaw(db, "pusher", "owner:o1", "", 100)
		if pe := asPgError(last); pe == nil || pe.Code != "SY503" {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	var cov string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(coalesce(coverage, 'NULL'), ','), 'none') FROM synchro.write_fence WHERE client_id = 'pusher'`).Scan(&cov))
	t.Logf("write fence coverage: %s", cov)
	require.NoError(t, last, "the pushing client is served once the stream caught up")
}

// A push at REPEATABLE READ whose snapshot predates an activation read the registry of
// its snapshot: after set_columns removed a column and the activation committed, such
// a push wrote the removed column and returned it (found by review 2026-12-05). It
// fails with 40001 now and is retried whole, as every REPEATABLE READ transaction that
// a concurrent commit made stale; the retry sees the new registry. Also when the
// activation is still in flight at the push: the push waits for it, then fails.
func TestPushRepeatableReadAfterActivation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	narrow := `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks'),
	             ARRAY[%s]::name[]); SELECT synchro.activate_registry();`
	withTitle := func(id int) []map[string]any {
		return []map[string]any{{"id": mutationID(9, id), "table": "tasks", "op": "insert", "pk": id,
			"row": map[string]any{"owner": "a", "title": "t"}}}
	}

	t.Run("committed", func(t *testing.T) {
		tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1`) // the snapshot
		require.NoError(t, err)
		mustExec(t, db, fmt.Sprintf(narrow, `'id', 'project_id', 'owner', 'reviewer', 'v'`))

		_, err = pushRaw(ctx, tx, "rr", withTitle(1))
		requireSQLState(t, err, "40001")
		require.NoError(t, tx.Rollback(ctx))

		// Retried whole: the column is no longer registered.
		_, err = pushRaw(ctx, db.Pool, "rr", withTitle(1))
		requireSQLState(t, err, "SY400")
		_, err = pushRaw(ctx, db.Pool, "rr", []map[string]any{{"id": mutationID(9, 1), "table": "tasks", "op": "insert", "pk": 1,
			"row": map[string]any{"owner": "a"}}})
		require.NoError(t, err)
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM tasks WHERE title IS NOT NULL`))
	})

	// A read-only transaction takes no lock (25006 otherwise): its replay of a decided
	// mutation returns the recorded outcome.
	t.Run("read-only-replay", func(t *testing.T) {
		m := []map[string]any{{"id": mutationID(9, 3), "table": "tasks", "op": "insert", "pk": 3,
			"row": map[string]any{"owner": "a"}}}
		first, err := pushRaw(ctx, db.Pool, "rr3", m)
		require.NoError(t, err)
		tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		again, err := pushRaw(ctx, tx, "rr3", m)
		require.NoError(t, err)
		require.JSONEq(t, first, again)
	})

	t.Run("in-flight", func(t *testing.T) {
		tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1`)
		require.NoError(t, err)

		act, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = act.Rollback(ctx) }()
		_, err = act.Exec(ctx, fmt.Sprintf(narrow, `'id', 'project_id', 'owner', 'v'`))
		require.NoError(t, err)

		done := make(chan error, 1)
		go func() {
			_, err := pushRaw(ctx, tx, "rr2", []map[string]any{{"id": mutationID(9, 2), "table": "tasks", "op": "insert", "pk": 2,
				"row": map[string]any{"owner": "a", "reviewer": "r"}}})
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("the push did not wait for the activation in flight: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		require.NoError(t, act.Commit(ctx))
		requireSQLState(t, <-done, "40001")
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM tasks WHERE reviewer IS NOT NULL`))
	})
}

// Found by an independent review of push (2026-12-05, twenty-fourth session); the first
// four were red before their fix (a plain INSERT in a block of its own instead of ON
// CONFLICT DO NOTHING RETURNING; messages of whole-call failures replaced).

// An insert whose key exists but is hidden from the caller (row-level
// security) is answered "conflict"; push ran the INSERT first (ON CONFLICT DO NOTHING)
// and kept what the application's BEFORE INSERT trigger did for that proposed row: a
// conflicted mutation left writes behind (here a registered row, fenced and so
// pull-visible). The same INSERT run by the application fails 23505 and its trigger's
// writes roll back with it; push's does now too.
func TestPushConflictUndoesTriggerWrites(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE FUNCTION public.owned_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO public.tags (name, n) VALUES ('audit-' || NEW.id, NEW.id);
		  RETURN NEW;
		END $$;
		CREATE TRIGGER owned_audit BEFORE INSERT ON public.owned FOR EACH ROW EXECUTE FUNCTION public.owned_audit();`)
	_, ident := rp2Role(t, e, "rv_hidden")
	e.exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON public.owned TO ` + ident)
	e.exec(`GRANT SELECT, INSERT ON public.tags TO ` + ident)
	e.exec(`INSERT INTO public.owned (id, owner, body) VALUES (50, 'someone_else', 'theirs')`)
	e.exec(`DELETE FROM public.tags`)
	conn := rp2As(t, e, ident)

	// The application's own INSERT of that key: 23505, nothing of it stays.
	_, err := conn.Exec(e.ctx, `INSERT INTO public.owned (id, body) VALUES (50, 'mine')`)
	require.Error(t, err)
	require.Zero(t, e.count(`SELECT count(*) FROM public.tags`))

	id := pushID()
	raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t, pushIns(id, "owned", 50, pm{"body": "mine"})))
	require.NoError(t, err)
	t.Logf("push: %s", raw)
	res := pushParse(t, raw)
	require.Equal(t, "conflict", rp2Status(t, res[0]))
	require.Zero(t, e.count(`SELECT count(*) FROM public.tags`),
		"a conflicted mutation must write nothing: the trigger's row of the proposed insert stayed (fenced: %d row_version)",
		e.count(`SELECT count(*) FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'tags'`))
}

// The same without row-level security: two writers insert one key at once (READ
// COMMITTED). The push that loses the race is answered "conflict", and its BEFORE
// INSERT trigger's writes for the proposed row (which committed with the call) are
// undone.
func TestPushInsertRaceConflictUndoesTriggerWrites(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.labels (name text PRIMARY KEY, color text);
		CREATE FUNCTION public.labels_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  INSERT INTO public.tags (name, n) VALUES ('created-' || NEW.name || '-' || NEW.color, 1);
		  RETURN NEW;
		END $$;
		CREATE TRIGGER labels_audit BEFORE INSERT ON public.labels FOR EACH ROW EXECUTE FUNCTION public.labels_audit();
		SELECT synchro.register_table('public.labels', 'labels');
		SELECT synchro.activate_registry();`)

	// Another writer inserts the key and has not committed yet.
	tx, err := e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `INSERT INTO public.labels (name, color) VALUES ('urgent', 'red')`)
	require.NoError(t, err)

	pid, ch := e.pushInBackground("c1", pushJSON(t, pushIns(pushID(), "labels", "urgent", pm{"color": "blue"})))
	pushWaitForLock(t, e.ctx, e.db.Pool, pid)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tx.Commit(e.ctx))
	raw := pushAwait(t, ch)
	t.Logf("push: %s", raw)
	res := pushParse(t, raw)
	require.Equal(t, "conflict", rp2Status(t, res[0]))
	require.Zero(t, e.count(`SELECT count(*) FROM public.tags WHERE name = 'created-urgent-blue'`),
		"the conflicted insert's trigger row committed (and was fenced for pull): %d write fences of client c1",
		e.count(`SELECT count(*) FROM synchro.write_fence WHERE client_id = 'c1'`))
}

// Errors never carry row values (CONTRACT.md, Error codes). Push replaced the message
// of a whole-call failure only outside classes 27, 0A, 40, 53, 54, 55, 57 and SY; an
// application trigger that refuses a write with one of those classes (55000
// object_not_in_prerequisite_state and 40001 are common "try later" choices) had its
// message, with the row's value, passed to the push caller. Only SY keeps its message.
func TestPushPassThroughErrorCarriesNoValue(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.cards (id int4 PRIMARY KEY, number text);
		CREATE FUNCTION public.cards_check() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  RAISE EXCEPTION 'card % is being processed, try later', NEW.number USING ERRCODE = '55000';
		END $$;
		CREATE TRIGGER cards_check BEFORE INSERT ON public.cards FOR EACH ROW EXECUTE FUNCTION public.cards_check();
		SELECT synchro.register_table('public.cards', 'cards');
		SELECT synchro.activate_registry();`)
	_, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(pushID(), "cards", 1, pm{"number": "4111-1111-1111-1111"})))
	pgErr := pushRequireCode(t, err, "55000")
	t.Logf("error: %s", pgErr.Message)
	require.NotContains(t, pgErr.Message, "4111-1111-1111-1111", "a push error carries the row's value")
}

// A "drop box" table whose row-level security lets the caller insert rows it may not
// read back (INSERT WITH CHECK true, SELECT only its own). The application's INSERT
// succeeds; push's INSERT ... ON CONFLICT DO NOTHING RETURNING made PostgreSQL apply the
// SELECT policies to the new row as well (either clause does) and failed 42501, so push
// rejected, for ever, a write the caller's privileges and policies allow.
func TestPushInsertIntoWriteOnlyRows(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.inbox (id int4 PRIMARY KEY, recipient text NOT NULL, body text);
		ALTER TABLE public.inbox ENABLE ROW LEVEL SECURITY;
		CREATE POLICY inbox_send ON public.inbox FOR INSERT WITH CHECK (true);
		CREATE POLICY inbox_read ON public.inbox FOR SELECT USING (recipient = current_user);
		SELECT synchro.register_table('public.inbox', 'inbox');
		SELECT synchro.activate_registry();`)
	_, ident := rp2Role(t, e, "rv_sender")
	e.exec(`GRANT SELECT, INSERT ON public.inbox TO ` + ident)
	conn := rp2As(t, e, ident)

	// The application's own write is allowed.
	_, err := conn.Exec(e.ctx, `INSERT INTO public.inbox (id, recipient, body) VALUES (1, 'someone_else', 'hello')`)
	require.NoError(t, err)
	_, err = conn.Exec(e.ctx, `INSERT INTO public.inbox (id, recipient, body) VALUES (3, 'someone_else', 'hello') ON CONFLICT (id) DO NOTHING`)
	t.Logf("direct ON CONFLICT DO NOTHING: %v", err)

	raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t, pushIns(pushID(), "inbox", 2, pm{"recipient": "someone_else", "body": "hello"})))
	require.NoError(t, err)
	t.Logf("push: %s", raw)
	res := pushParse(t, raw)
	require.Equal(t, "accepted", rp2Status(t, res[0]), "the caller's policies allow this insert: %s", raw)
}

// A BEFORE INSERT trigger that skips the row (RETURN NULL): the mutation still gets an
// outcome (conflict, as before the plain INSERT), never a whole-call failure.
func TestPushInsertSkippedByTrigger(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.sink (id int4 PRIMARY KEY, v text);
		CREATE FUNCTION public.sink_skip() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
		CREATE TRIGGER sink_skip BEFORE INSERT ON public.sink FOR EACH ROW EXECUTE FUNCTION public.sink_skip();
		SELECT synchro.register_table('public.sink', 'sink');
		SELECT synchro.activate_registry();`)
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(pushID(), "sink", 1, pm{"v": "x"})))
	require.NoError(t, err)
	t.Logf("push: %s", raw)
	require.Equal(t, "conflict", rp2Status(t, pushParse(t, raw)[0]))
}

// Found by a review of the fixes above (2026-12-05); each was red on their first form.

// A primary key with INCLUDE columns: registration accepts it (one key column), and a
// lost insert race on it is a conflict, as with ON CONFLICT (the first plain-INSERT
// handler counted the INCLUDE columns and rejected it 23505, for good).
func TestPushInsertRaceCoveringPrimaryKey(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.labels2 (name text, color text, PRIMARY KEY (name) INCLUDE (color));
		SELECT synchro.register_table('public.labels2', 'labels2');
		SELECT synchro.activate_registry();`)
	tx, err := e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `INSERT INTO public.labels2 (name, color) VALUES ('urgent', 'red')`)
	require.NoError(t, err)
	pid, ch := e.pushInBackground("c1", pushJSON(t, pushIns(pushID(), "labels2", "urgent", pm{"color": "blue"})))
	pushWaitForLock(t, e.ctx, e.db.Pool, pid)
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tx.Commit(e.ctx))
	raw := pushAwait(t, ch)
	t.Logf("push: %s", raw)
	require.Equal(t, "conflict", rp2Status(t, pushParse(t, raw)[0]))
}

// An application trigger raising one of the pack's SY codes with a value in its text:
// only the pack's own SY messages are kept (it kept its message before).
func TestPushTriggerSYMessageCarriesNoValue(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.cards2 (id int4 PRIMARY KEY, number text);
		CREATE FUNCTION public.cards2_check() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  RAISE EXCEPTION 'card % refused', NEW.number USING ERRCODE = 'SY400';
		END $$;
		CREATE TRIGGER cards2_check BEFORE INSERT ON public.cards2 FOR EACH ROW EXECUTE FUNCTION public.cards2_check();
		SELECT synchro.register_table('public.cards2', 'cards2');
		SELECT synchro.activate_registry();`)
	_, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(pushID(), "cards2", 1, pm{"number": "4111-1111-1111-1111"})))
	pgErr := pushRequireCode(t, err, "SY400")
	t.Logf("error: %s", pgErr.Message)
	require.NotContains(t, pgErr.Message, "4111-1111-1111-1111", "a push error carries the row's value")
}

// A trigger's unique violation on another table whose constraint has the key index's
// name (another schema: CREATE TABLE audit.x (LIKE x INCLUDING ALL)) is that
// mutation's rejection, not a conflict on the key (null at READ COMMITTED, 40001 for
// ever at REPEATABLE READ with the first plain-INSERT handler).
func TestPushForeignConstraintSameName(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE SCHEMA audit;
		CREATE TABLE audit.notes3 (id int4, CONSTRAINT notes3_pkey PRIMARY KEY (id));
		INSERT INTO audit.notes3 VALUES (1);
		CREATE TABLE public.notes3 (id int4 PRIMARY KEY, v text);
		CREATE FUNCTION public.notes3_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO audit.notes3 VALUES (1); RETURN NEW; END $$;
		CREATE TRIGGER notes3_audit BEFORE INSERT ON public.notes3 FOR EACH ROW EXECUTE FUNCTION public.notes3_audit();
		SELECT synchro.register_table('public.notes3', 'notes3');
		SELECT synchro.activate_registry();`)
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(pushID(), "notes3", 7, pm{"v": "x"})))
	require.NoError(t, err)
	require.Equal(t, "rejected", rp2Status(t, pushParse(t, raw)[0]), raw)
	tx, err := e.db.Pool.Begin(e.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(e.ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	raw, err = pushRawOn(e.ctx, tx, "c2", pushJSON(t, pushIns(pushID(), "notes3", 8, pm{"v": "x"})))
	t.Logf("RR push: %s err=%v", raw, err)
	require.NoError(t, err, "a unique_violation of audit.notes3 must be a rejection (as at RC), not 40001 for ever")
	require.Equal(t, "rejected", rp2Status(t, pushParse(t, raw)[0]), raw)
}

// Row-level security on, with a policy that hides nothing: at REPEATABLE READ an insert
// that lost a race to an insert committed after its snapshot is 40001, as with ON
// CONFLICT (the first plain-INSERT handler answered a conflict with null version and
// row whenever row-level security was active, recorded for good).
func TestPushRepeatableReadRaceUnderPermissiveRLS(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`
		CREATE TABLE public.open_rls (id int4 PRIMARY KEY, v text);
		ALTER TABLE public.open_rls ENABLE ROW LEVEL SECURITY;
		CREATE POLICY everything ON public.open_rls USING (true) WITH CHECK (true);
		SELECT synchro.register_table('public.open_rls', 'open_rls');
		SELECT synchro.activate_registry();`)
	_, ident := rp2Role(t, e, "rv_open")
	e.exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON public.open_rls TO ` + ident)
	conn := rp2As(t, e, ident)
	_, err := conn.Exec(e.ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	_, err = conn.Exec(e.ctx, `SELECT 1`) // the snapshot
	require.NoError(t, err)
	e.exec(`INSERT INTO public.open_rls VALUES (5, 'theirs')`)
	raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t, pushIns(pushID(), "open_rls", 5, pm{"v": "mine"})))
	_, _ = conn.Exec(e.ctx, `ROLLBACK`)
	t.Logf("push: %s err=%v", raw, err)
	requireSQLState(t, err, "40001")
}

// A REPEATABLE READ transaction that pushed holds the active registry generation FOR
// SHARE to its end (TestPushRepeatableReadAfterActivation). An activation meanwhile
// waits for it holding no table's lock: it took every registered table's lock first
// and then waited at its update of that row, so one idle transaction that had pushed
// (here a replay, which writes nothing) stopped every writer of every registered table,
// and deadlocked with the activation when it wrote one (found by review 2026-12-05).
func TestActivationWaitsForRepeatableReadPushWithoutBlockingWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	m := []map[string]any{{"id": mutationID(9, 1), "table": "tasks", "op": "insert", "pk": 1,
		"row": map[string]any{"owner": "a"}}}
	_, err := pushRaw(ctx, db.Pool, "rr", m)
	require.NoError(t, err)

	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = pushRaw(ctx, tx, "rr", m) // a replay: the recorded outcome, nothing written
	require.NoError(t, err)

	act := make(chan error, 1)
	go func() {
		_, err := db.Pool.Exec(ctx, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks'),
		             ARRAY['id', 'project_id', 'owner', 'v']::name[]); SELECT synchro.activate_registry();`)
		act <- err
	}()
	eventually(t, 10*time.Second, "the activation to wait", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event IS NOT NULL AND query LIKE '%activate_registry%'`) > 0
	})
	time.Sleep(time.Second)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET statement_timeout = '5s'`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO tasks (id, owner) VALUES (99, 'b')`)
	require.NoError(t, err, "a READ COMMITTED writer waited behind an activation that waits for an idle push")
	_, err = conn.Exec(ctx, `RESET statement_timeout`)
	require.NoError(t, err)

	// The same transaction goes on and writes a registered table: no deadlock.
	_, err = pushRaw(ctx, tx, "rr", []map[string]any{{"id": mutationID(9, 2), "table": "tasks", "op": "insert", "pk": 2,
		"row": map[string]any{"owner": "a"}}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-act:
		require.NoError(t, err, "the activation, once the push's transaction ended")
	case <-time.After(30 * time.Second):
		t.Fatal("the activation did not finish after the push's transaction ended")
	}
}

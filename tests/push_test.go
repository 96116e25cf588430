package tests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// pushSchema is the application schema every push test starts from. Every table is
// registered and the registry activated by pushSetup.
//
//   - items (int4 key): defaults, a CHECK, a non-key UNIQUE, a NOT NULL, a BEFORE INSERT
//     trigger that stamps the row (and raises, with the note in its message, for notes
//     starting with "refuse:"), a BEFORE UPDATE trigger that changes the key when the
//     note becomes 'rekey' while a row with note 'arm' exists, and a column that is not
//     registered (hidden).
//   - children (int8 key): a deferred FK to items and a deferred UNIQUE.
//   - docs (uuid key), tags (text key).
//   - echo (int4 key): an AFTER INSERT trigger, firing before the fence, that updates
//     the just-inserted row when n = 42 (the fence of the insert then fires late).
//   - measures: types whose text rendering depends on session settings.
//   - owned: row-level security, only rows whose owner is current_user.
const pushSchema = `
CREATE TABLE public.items (
  id     int4 PRIMARY KEY,
  name   text NOT NULL,
  qty    int4 NOT NULL DEFAULT 7 CONSTRAINT items_qty_nonneg CHECK (qty >= 0),
  code   text CONSTRAINT items_code_key UNIQUE,
  note   text,
  stamp  text,
  hidden text NOT NULL DEFAULT 'not-registered'
);
CREATE FUNCTION public.items_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.note LIKE 'refuse:%' THEN
    RAISE EXCEPTION 'refused: the note was %', NEW.note;
  END IF;
  NEW.stamp := 'stamped:' || NEW.name;
  RETURN NEW;
END $$;
CREATE TRIGGER items_stamp BEFORE INSERT ON public.items
  FOR EACH ROW EXECUTE FUNCTION public.items_before_insert();
CREATE FUNCTION public.items_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.note = 'rekey' AND EXISTS (SELECT 1 FROM public.items WHERE note = 'arm') THEN
    NEW.id := NEW.id + 1000;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER items_a_rekey BEFORE UPDATE ON public.items
  FOR EACH ROW EXECUTE FUNCTION public.items_before_update();

CREATE TABLE public.children (
  id      int8 PRIMARY KEY,
  item_id int4 CONSTRAINT children_item_fk REFERENCES public.items (id) DEFERRABLE INITIALLY DEFERRED,
  slot    int4 CONSTRAINT children_slot_key UNIQUE DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE public.docs (id uuid PRIMARY KEY, title text);
CREATE TABLE public.tags (name text PRIMARY KEY, n int4);

CREATE TABLE public.echo (id int4 PRIMARY KEY, n int4 NOT NULL DEFAULT 0);
CREATE FUNCTION public.echo_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE public.echo SET n = n + 1 WHERE id = NEW.id;
  RETURN NULL;
END $$;
-- "a_bump" sorts before "synchro_fence_insert": it runs (and its nested UPDATE fires
-- its own fence) before the fence of the insert.
CREATE TRIGGER a_bump AFTER INSERT ON public.echo
  FOR EACH ROW WHEN (NEW.n = 42) EXECUTE FUNCTION public.echo_bump();

CREATE TABLE public.measures (
  id     int8 PRIMARY KEY,
  at     timestamptz,
  ts     timestamp,
  d      date,
  f      float8,
  iv     interval,
  amount numeric,
  doc    jsonb
);

CREATE TABLE public.owned (
  id    int4 PRIMARY KEY,
  owner text NOT NULL DEFAULT current_user,
  body  text
);
ALTER TABLE public.owned ENABLE ROW LEVEL SECURITY;
CREATE POLICY owned_mine ON public.owned USING (owner = current_user) WITH CHECK (owner = current_user);

SELECT synchro.register_table('public.items', 'items', ARRAY['id', 'name', 'qty', 'code', 'note', 'stamp']::name[]);
SELECT synchro.register_table('public.children', 'children');
SELECT synchro.register_table('public.docs', 'docs');
SELECT synchro.register_table('public.tags', 'tags');
SELECT synchro.register_table('public.echo', 'echo');
SELECT synchro.register_table('public.measures', 'measures');
SELECT synchro.register_table('public.owned', 'owned');
SELECT synchro.activate_registry();
`

// pushStateTables is everything a push may write: "nothing written" means none of it
// changed.
var pushStateTables = []string{
	"public.items", "public.children", "public.docs", "public.tags", "public.echo",
	"public.measures", "public.owned",
	"synchro.row_version", "synchro.write_fence", "synchro.push_context",
}

type pushEnv struct {
	t   *testing.T
	ctx context.Context
	db  *testdb.DB
}

func pushSetup(t *testing.T) *pushEnv {
	t.Helper()
	db := testdb.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, pushSchema)
	require.NoError(t, err)
	return &pushEnv{t: t, ctx: ctx, db: db}
}

// pushQuerier is a pool, a connection or a transaction.
type pushQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pushRawOn calls synchro.push and returns the raw text of its result. A nil client
// or mutations is SQL NULL.
func pushRawOn(ctx context.Context, q pushQuerier, client any, mutations any) (string, error) {
	var out string
	err := q.QueryRow(ctx, `SELECT synchro.push($1::text, $2::jsonb)::text`, client, mutations).Scan(&out)
	return out, err
}

func (e *pushEnv) exec(sql string, args ...any) {
	e.t.Helper()
	_, err := e.db.Pool.Exec(e.ctx, sql, args...)
	require.NoError(e.t, err)
}

// push calls synchro.push on the pool and requires it to succeed.
func (e *pushEnv) push(client, mutations string) []pushOut {
	e.t.Helper()
	raw, err := pushRawOn(e.ctx, e.db.Pool, client, mutations)
	require.NoError(e.t, err)
	res := pushParse(e.t, raw)
	var ms []json.RawMessage
	require.NoError(e.t, json.Unmarshal([]byte(mutations), &ms))
	require.Len(e.t, res, len(ms), "one result per mutation")
	return res
}

// pushFails calls synchro.push, requires it to fail with code and to write nothing
// (no row, version, write fence, push context or outcome changes), and returns the
// error.
func (e *pushEnv) pushFails(q pushQuerier, client any, mutations any, code string) *pgconn.PgError {
	e.t.Helper()
	before := e.state(true)
	raw, err := pushRawOn(e.ctx, q, client, mutations)
	pgErr := pushRequireCode(e.t, err, code)
	require.Empty(e.t, raw)
	require.Equal(e.t, before, e.state(true), "a failed call must write nothing")
	return pgErr
}

func pushRequireCode(t *testing.T, err error, code string) *pgconn.PgError {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want SQLSTATE %s, got %v", code, err)
	require.Equal(t, code, pgErr.Code, "message: %s", pgErr.Message)
	return pgErr
}

// state renders every table a push may write, to compare before and after.
func (e *pushEnv) state(withOutcomes bool) string {
	e.t.Helper()
	tables := pushStateTables
	if withOutcomes {
		tables = append(append([]string{}, tables...), "synchro.mutation_outcome")
	}
	var b strings.Builder
	for _, table := range tables {
		var s string
		require.NoError(e.t, e.db.Pool.QueryRow(e.ctx, fmt.Sprintf(
			`SELECT coalesce(jsonb_agg(to_jsonb(x) ORDER BY to_jsonb(x)::text), '[]')::text FROM %s x`, table)).Scan(&s))
		b.WriteString(table + ": " + s + "\n")
	}
	return b.String()
}

func (e *pushEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.db.Pool.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

// version is the row's current version in synchro.row_version ("" when none).
func (e *pushEnv) version(tableID, pk string) string {
	e.t.Helper()
	var v *string
	err := e.db.Pool.QueryRow(e.ctx, `
		SELECT rv.version FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
		WHERE r.table_id = $1 AND rv.pk = $2`, tableID, pk).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(e.t, err)
	return *v
}

// requireFence requires exactly one write fence for (client, mutation), with these
// values, pending (coverage NULL).
func (e *pushEnv) requireFence(client, mutationID, tableID, pk, op, version string) {
	e.t.Helper()
	require.Equal(e.t, 1, e.count(`SELECT count(*) FROM synchro.write_fence WHERE client_id = $1 AND mutation_id = $2`,
		client, mutationID), "one write fence per accepted mutation")
	require.Equal(e.t, 1, e.count(`
		SELECT count(*) FROM synchro.write_fence f JOIN synchro.relation r USING (relation_id)
		WHERE f.client_id = $1 AND f.mutation_id = $2 AND r.table_id = $3 AND f.pk = $4 AND f.op = $5
		  AND f.version = $6 AND f.coverage IS NULL AND f.covered_at IS NULL`,
		client, mutationID, tableID, pk, op, version), "write fence of %s %s/%s", op, tableID, pk)
}

func (e *pushEnv) requireNoFence(client, mutationID string) {
	e.t.Helper()
	require.Zero(e.t, e.count(`SELECT count(*) FROM synchro.write_fence WHERE client_id = $1 AND mutation_id = $2`,
		client, mutationID))
}

func (e *pushEnv) requireNoPushContext() {
	e.t.Helper()
	require.Zero(e.t, e.count(`SELECT count(*) FROM synchro.push_context`))
}

// itemRow is the stored item as its registered columns render (no "hidden").
func (e *pushEnv) itemRow(id int) string {
	e.t.Helper()
	var s string
	require.NoError(e.t, e.db.Pool.QueryRow(e.ctx, `
		SELECT jsonb_build_object('id', id, 'name', name, 'qty', qty, 'code', code, 'note', note, 'stamp', stamp)::text
		FROM public.items WHERE id = $1`, id).Scan(&s))
	return s
}

func (e *pushEnv) itemExists(id int) bool {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM public.items WHERE id = $1`, id) == 1
}

// pushID is a fresh random (v4) mutation id.
func pushID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// pm is one mutation, as a JSON object.
type pm map[string]any

func pushIns(id, table string, pk any, row pm) pm {
	m := pm{"id": id, "table": table, "op": "insert", "pk": pk}
	if row != nil {
		m["row"] = row
	}
	return m
}

func pushUpd(id, table string, pk any, base string, row pm) pm {
	m := pm{"id": id, "table": table, "op": "update", "pk": pk, "base_version": base}
	if row != nil {
		m["row"] = row
	}
	return m
}

func pushDel(id, table string, pk any, base string) pm {
	return pm{"id": id, "table": table, "op": "delete", "pk": pk, "base_version": base}
}

func pushJSON(t *testing.T, ms ...any) string {
	t.Helper()
	if ms == nil {
		ms = []any{}
	}
	b, err := json.Marshal(ms)
	require.NoError(t, err)
	return string(b)
}

// pushOut is one result entry, its fields kept raw.
type pushOut map[string]json.RawMessage

// pushParse checks the result is exactly {"results": [...]} and returns the entries.
func pushParse(t *testing.T, raw string) []pushOut {
	t.Helper()
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(raw), &top))
	require.Len(t, top, 1, "result is exactly {\"results\": [...]}: %s", raw)
	require.Contains(t, top, "results")
	var out []pushOut
	require.NoError(t, json.Unmarshal(top["results"], &out))
	require.NotEmpty(t, out, "a call holds at least one mutation")
	return out
}

func (o pushOut) str(t *testing.T, key string) string {
	t.Helper()
	raw, ok := o[key]
	require.True(t, ok, "result has %q: %v", key, o)
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "%q is a string: %s", key, raw)
	return s
}

func pushRequireKeys(t *testing.T, o pushOut, keys ...string) {
	t.Helper()
	got := make([]string, 0, len(o))
	for k := range o {
		got = append(got, k)
	}
	require.ElementsMatch(t, keys, got, "result keys of %v", o)
}

// pushAccepted requires an accepted entry for id and returns its version. withRow:
// the entry carries "row" (insert, update); otherwise it must not (delete).
func pushAccepted(t *testing.T, o pushOut, id string, withRow bool) string {
	t.Helper()
	if withRow {
		pushRequireKeys(t, o, "id", "status", "version", "row")
	} else {
		pushRequireKeys(t, o, "id", "status", "version")
	}
	require.Equal(t, id, o.str(t, "id"))
	require.Equal(t, "accepted", o.str(t, "status"))
	v := o.str(t, "version")
	require.NotEmpty(t, v)
	return v
}

// pushConflict requires a conflict entry for id carrying version (JSON null when "")
// and returns its row.
func pushConflict(t *testing.T, o pushOut, id, version string) json.RawMessage {
	t.Helper()
	pushRequireKeys(t, o, "id", "status", "version", "row")
	require.Equal(t, id, o.str(t, "id"))
	require.Equal(t, "conflict", o.str(t, "status"))
	if version == "" {
		require.JSONEq(t, "null", string(o["version"]))
		require.JSONEq(t, "null", string(o["row"]))
	} else {
		require.Equal(t, version, o.str(t, "version"))
	}
	return o["row"]
}

// pushRejected requires a rejected entry for id with code and returns its reason.
func pushRejected(t *testing.T, o pushOut, id, code string) string {
	t.Helper()
	pushRequireKeys(t, o, "id", "status", "code", "reason")
	require.Equal(t, id, o.str(t, "id"))
	require.Equal(t, "rejected", o.str(t, "status"))
	require.Equal(t, code, o.str(t, "code"))
	reason := o.str(t, "reason")
	require.NotEmpty(t, reason)
	return reason
}

func TestPushAccepted(t *testing.T) {
	t.Parallel()

	t.Run("Insert", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(id, "items", 1, pm{"name": "alpha", "code": "c-1"})))
		require.NoError(t, err)
		res := pushParse(t, raw)
		require.Len(t, res, 1)
		v := pushAccepted(t, res[0], id, true)
		// Defaults for omitted columns, the BEFORE INSERT trigger's change, and only the
		// registered columns (no "hidden").
		require.JSONEq(t, `{"id": 1, "name": "alpha", "qty": 7, "code": "c-1", "note": null, "stamp": "stamped:alpha"}`,
			string(res[0]["row"]))
		require.JSONEq(t, e.itemRow(1), string(res[0]["row"]))
		require.Equal(t, 1, e.count(`SELECT count(*) FROM public.items WHERE id = 1 AND hidden = 'not-registered'`))
		require.Equal(t, v, e.version("items", "1"))
		e.requireFence("c1", id, "items", "1", "insert", v)
		e.requireNoPushContext()
	})

	t.Run("Update", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name, code, note) VALUES (1, 'alpha', 'c-1', 'n-1')`)
		base := e.version("items", "1")
		require.NotEmpty(t, base)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushUpd(id, "items", 1, base, pm{"qty": 9, "note": nil})))
		require.Len(t, res, 1)
		v := pushAccepted(t, res[0], id, true)
		require.NotEqual(t, base, v, "an accepted update allocates a new version")
		// Only the columns in row changed; the others kept their values.
		require.JSONEq(t, `{"id": 1, "name": "alpha", "qty": 9, "code": "c-1", "note": null, "stamp": "stamped:alpha"}`,
			string(res[0]["row"]))
		require.JSONEq(t, e.itemRow(1), string(res[0]["row"]))
		require.Equal(t, 1, e.count(`SELECT count(*) FROM public.items WHERE id = 1 AND hidden = 'not-registered'`))
		require.Equal(t, v, e.version("items", "1"))
		e.requireFence("c1", id, "items", "1", "update", v)
		e.requireNoPushContext()

		// An update that sets nothing still passes the fence: a new version.
		id2 := pushID()
		res = e.push("c1", pushJSON(t, pushUpd(id2, "items", 1, v, nil)))
		v2 := pushAccepted(t, res[0], id2, true)
		require.NotEqual(t, v, v2)
		require.JSONEq(t, e.itemRow(1), string(res[0]["row"]))
		e.requireFence("c1", id2, "items", "1", "update", v2)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		base := e.version("items", "1")
		id := pushID()
		res := e.push("c1", pushJSON(t, pushDel(id, "items", 1, base)))
		require.Len(t, res, 1)
		v := pushAccepted(t, res[0], id, false) // no "row" key
		require.NotEqual(t, base, v)
		require.False(t, e.itemExists(1))
		require.Equal(t, v, e.version("items", "1"))
		require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.row_version WHERE pk = '1' AND deleted`))
		e.requireFence("c1", id, "items", "1", "delete", v)
		e.requireNoPushContext()

		// A delete may carry an empty row.
		e.exec(`INSERT INTO public.tags (name, n) VALUES ('t', 1)`)
		id2 := pushID()
		del := pushDel(id2, "tags", "t", e.version("tags", "t"))
		del["row"] = pm{}
		res = e.push("c1", pushJSON(t, del))
		pushAccepted(t, res[0], id2, false)
	})

	t.Run("ResultsInOrder", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha'), (2, 'beta')`)
		v1, v2 := e.version("items", "1"), e.version("items", "2")
		ids := []string{pushID(), pushID(), pushID(), pushID(), pushID()}
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushDel(ids[0], "items", 2, v2),
			pushIns(ids[1], "tags", "x", pm{"n": 1}),
			pushUpd(ids[2], "items", 1, v1, pm{"name": "one"}),
			pushIns(ids[3], "docs", "0b7f2a3c-1111-4a4a-8b8b-123456789abc", pm{"title": "d"}),
			pushIns(ids[4], "items", 3, pm{"name": "three"}),
		))
		require.NoError(t, err)
		res := pushParse(t, raw)
		require.Len(t, res, 5)
		vd := pushAccepted(t, res[0], ids[0], false)
		vt := pushAccepted(t, res[1], ids[1], true)
		vu := pushAccepted(t, res[2], ids[2], true)
		vdoc := pushAccepted(t, res[3], ids[3], true)
		vi := pushAccepted(t, res[4], ids[4], true)
		require.JSONEq(t, `{"name": "x", "n": 1}`, string(res[1]["row"]))
		require.JSONEq(t, `{"id": "0b7f2a3c-1111-4a4a-8b8b-123456789abc", "title": "d"}`, string(res[3]["row"]))
		e.requireFence("c1", ids[0], "items", "2", "delete", vd)
		e.requireFence("c1", ids[1], "tags", "x", "insert", vt)
		e.requireFence("c1", ids[2], "items", "1", "update", vu)
		e.requireFence("c1", ids[3], "docs", "0b7f2a3c-1111-4a4a-8b8b-123456789abc", "insert", vdoc)
		e.requireFence("c1", ids[4], "items", "3", "insert", vi)
		require.Equal(t, 5, e.count(`SELECT count(*) FROM synchro.write_fence`))
		require.Len(t, map[string]bool{vd: true, vt: true, vu: true, vdoc: true, vi: true}, 5, "versions are distinct")
		e.requireNoPushContext()
	})

	t.Run("KeyRepeatedWithSameValue", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id1, id2 := pushID(), pushID()
		res := e.push("c1", pushJSON(t, pushIns(id1, "items", 4, pm{"id": 4, "name": "four"})))
		v := pushAccepted(t, res[0], id1, true)
		res = e.push("c1", pushJSON(t, pushUpd(id2, "items", 4, v, pm{"id": 4, "qty": 1})))
		pushAccepted(t, res[0], id2, true)
		require.JSONEq(t, `{"id": 4, "name": "four", "qty": 1, "code": null, "note": null, "stamp": "stamped:four"}`,
			string(res[0]["row"]))
	})
}

func TestPushConflict(t *testing.T) {
	t.Parallel()

	t.Run("InsertExisting", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name, code) VALUES (1, 'alpha', 'c-1')`)
		cur := e.version("items", "1")
		id, other := pushID(), pushID()
		res := e.push("c1", pushJSON(t,
			pushIns(id, "items", 1, pm{"name": "again", "code": "c-2"}),
			pushIns(other, "tags", "after", nil)))
		require.Len(t, res, 2)
		row := pushConflict(t, res[0], id, cur)
		want := `{"id": 1, "name": "alpha", "qty": 7, "code": "c-1", "note": null, "stamp": "stamped:alpha"}`
		require.JSONEq(t, want, string(row))
		vo := pushAccepted(t, res[1], other, true) // a conflict does not undo the others
		e.requireNoFence("c1", id)
		e.requireFence("c1", other, "tags", "after", "insert", vo)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.write_fence`))
		require.JSONEq(t, want, e.itemRow(1), "a conflict writes nothing")
		require.Equal(t, cur, e.version("items", "1"))
	})

	t.Run("UpdateStale", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		stale := e.version("items", "1")
		e.exec(`UPDATE public.items SET name = 'direct' WHERE id = 1`)
		cur := e.version("items", "1")
		require.NotEqual(t, stale, cur)
		before := e.state(false)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushUpd(id, "items", 1, stale, pm{"name": "mine"})))
		row := pushConflict(t, res[0], id, cur)
		require.JSONEq(t, `{"id": 1, "name": "direct", "qty": 7, "code": null, "note": null, "stamp": "stamped:alpha"}`, string(row))
		require.Equal(t, before, e.state(false), "a conflict writes nothing")
	})

	t.Run("DeleteStale", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		stale := e.version("items", "1")
		e.exec(`UPDATE public.items SET qty = 3 WHERE id = 1`)
		cur := e.version("items", "1")
		before := e.state(false)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushDel(id, "items", 1, stale)))
		row := pushConflict(t, res[0], id, cur)
		require.JSONEq(t, e.itemRow(1), string(row))
		require.Equal(t, before, e.state(false), "a conflict writes nothing")
		require.True(t, e.itemExists(1))
	})

	t.Run("UpdateAndDeleteAbsent", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		// Row 2 never existed; row 3 existed and was deleted (its version is a deletion
		// version, and presenting it as base still finds the row absent).
		e.exec(`INSERT INTO public.items (id, name) VALUES (3, 'gone')`)
		e.exec(`DELETE FROM public.items WHERE id = 3`)
		delVersion := e.version("items", "3")
		require.NotEmpty(t, delVersion)
		before := e.state(false)
		ids := []string{pushID(), pushID(), pushID(), pushID()}
		raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushUpd(ids[0], "items", 2, "0123456789abcdef0123456789abcdef", pm{"name": "x"}),
			pushDel(ids[1], "items", 2, "0123456789abcdef0123456789abcdef"),
			pushUpd(ids[2], "items", 3, delVersion, pm{"name": "x"}),
			pushDel(ids[3], "items", 3, delVersion),
		))
		require.NoError(t, err)
		res := pushParse(t, raw)
		require.Len(t, res, 4)
		for i, o := range res {
			pushConflict(t, o, ids[i], "")
		}
		// Both keys present and null, not omitted.
		require.Contains(t, raw, `"row": null`)
		require.Contains(t, raw, `"version": null`)
		require.Equal(t, before, e.state(false), "a conflict writes nothing")
	})
}

// pushRejectCase pushes [accepted, bad, accepted] and checks the bad one is rejected
// with code, no fence and no row, while the other two are applied. It returns the
// reason and the raw result.
func (e *pushEnv) pushRejectCase(bad func(id string) pm, code string) (reason, raw string) {
	t := e.t
	t.Helper()
	ids := []string{pushID(), pushID(), pushID()}
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
		pushIns(ids[0], "tags", "before", pm{"n": 1}),
		bad(ids[1]),
		pushIns(ids[2], "tags", "after", pm{"n": 2}),
	))
	require.NoError(t, err)
	res := pushParse(t, raw)
	require.Len(t, res, 3)
	v0 := pushAccepted(t, res[0], ids[0], true)
	reason = pushRejected(t, res[1], ids[1], code)
	v2 := pushAccepted(t, res[2], ids[2], true)
	e.requireFence("c1", ids[0], "tags", "before", "insert", v0)
	e.requireFence("c1", ids[2], "tags", "after", "insert", v2)
	e.requireNoFence("c1", ids[1])
	require.Equal(t, 2, e.count(`SELECT count(*) FROM public.tags`))
	require.Equal(t, 3, e.count(`SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'c1'`))
	e.requireNoPushContext()
	return reason, raw
}

func TestPushRejected(t *testing.T) {
	t.Parallel()

	t.Run("CheckViolation", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		reason, raw := e.pushRejectCase(func(id string) pm {
			return pushIns(id, "items", 1, pm{"name": "n", "qty": -987654})
		}, "23514")
		require.Contains(t, reason, "items_qty_nonneg")
		require.NotContains(t, raw, "987654")
		require.False(t, e.itemExists(1))
		require.Empty(t, e.version("items", "1"))
	})

	t.Run("UniqueViolationOnNonKeyColumn", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name, code) VALUES (1, 'alpha', 'dup-code-9931')`)
		reason, raw := e.pushRejectCase(func(id string) pm {
			return pushIns(id, "items", 2, pm{"name": "n", "code": "dup-code-9931"})
		}, "23505")
		require.Contains(t, reason, "items_code_key")
		require.NotContains(t, raw, "dup-code-9931")
		require.False(t, e.itemExists(2))
	})

	t.Run("NotNullViolation", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		v := e.version("items", "1")
		reason, _ := e.pushRejectCase(func(id string) pm {
			return pushUpd(id, "items", 1, v, pm{"name": nil})
		}, "23502")
		require.Contains(t, reason, "name")
		require.Equal(t, v, e.version("items", "1"))
		require.JSONEq(t, `{"id": 1, "name": "alpha", "qty": 7, "code": null, "note": null, "stamp": "stamped:alpha"}`, e.itemRow(1))
	})

	t.Run("BadTypeInput", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		_, raw := e.pushRejectCase(func(id string) pm {
			return pushIns(id, "items", 1, pm{"name": "n", "qty": "abc-bad-7731"})
		}, "22P02")
		require.NotContains(t, raw, "abc-bad-7731")
		require.False(t, e.itemExists(1))
	})

	t.Run("TriggerRaiseException", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		_, raw := e.pushRejectCase(func(id string) pm {
			return pushIns(id, "items", 1, pm{"name": "n", "note": "refuse:s3cr3t-7f1d"})
		}, "P0001")
		require.NotContains(t, raw, "s3cr3t")
		require.Zero(t, e.count(`SELECT count(*) FROM synchro.mutation_outcome WHERE outcome::text LIKE '%s3cr3t%'`))
		require.False(t, e.itemExists(1))
		// The trigger really raises with the secret in its message.
		_, err := e.db.Pool.Exec(e.ctx, `INSERT INTO public.items (id, name, note) VALUES (9, 'n', 'refuse:s3cr3t-7f1d')`)
		pgErr := pushRequireCode(t, err, "P0001")
		require.Contains(t, pgErr.Message, "s3cr3t-7f1d")
	})

	t.Run("DeferredForeignKey", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		ids := []string{pushID(), pushID(), pushID()}
		res := e.push("c1", pushJSON(t,
			pushIns(ids[0], "children", 10, pm{"item_id": 1}),
			pushIns(ids[1], "children", 11, pm{"item_id": 424242}),
			pushIns(ids[2], "children", 12, pm{"item_id": 1}),
		))
		require.Len(t, res, 3)
		pushAccepted(t, res[0], ids[0], true)
		reason := pushRejected(t, res[1], ids[1], "23503")
		require.Contains(t, reason, "children_item_fk")
		require.NotContains(t, reason, "424242")
		pushAccepted(t, res[2], ids[2], true)
		require.Equal(t, 2, e.count(`SELECT count(*) FROM public.children WHERE id IN (10, 12)`))
		require.Zero(t, e.count(`SELECT count(*) FROM public.children WHERE id = 11`))
		e.requireNoFence("c1", ids[1])
		require.Equal(t, 2, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	t.Run("DeferredUnique", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		ids := []string{pushID(), pushID(), pushID()}
		res := e.push("c1", pushJSON(t,
			pushIns(ids[0], "children", 20, pm{"slot": 5}),
			pushIns(ids[1], "children", 21, pm{"slot": 5}),
			pushIns(ids[2], "children", 22, pm{"slot": 6}),
		))
		require.Len(t, res, 3)
		pushAccepted(t, res[0], ids[0], true)
		reason := pushRejected(t, res[1], ids[1], "23505")
		require.Contains(t, reason, "children_slot_key")
		pushAccepted(t, res[2], ids[2], true)
		require.Equal(t, 2, e.count(`SELECT count(*) FROM public.children WHERE id IN (20, 22)`))
		require.Zero(t, e.count(`SELECT count(*) FROM public.children WHERE id = 21`))
		require.Equal(t, 2, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	// Push checks deferred constraints at the end of each mutation; the caller's own
	// transaction must keep its deferred constraints deferred after the call.
	t.Run("DeferredConstraintsStayDeferredForTheCaller", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		tx, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		id := pushID()
		raw, err := pushRawOn(e.ctx, tx, "c1", pushJSON(t, pushIns(id, "tags", "x", nil)))
		require.NoError(t, err)
		pushAccepted(t, pushParse(t, raw)[0], id, true)
		// The child first, its parent later in the same transaction: fine while the FK
		// is deferred until commit.
		_, err = tx.Exec(e.ctx, `INSERT INTO public.children (id, item_id) VALUES (1, 2)`)
		require.NoError(t, err, "synchro.push left SET CONSTRAINTS ALL IMMEDIATE in the caller's transaction")
		_, err = tx.Exec(e.ctx, `INSERT INTO public.items (id, name) VALUES (2, 'parent')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(e.ctx))
	})

	t.Run("RowLevelSecurity", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		var suffix [6]byte
		_, _ = rand.Read(suffix[:])
		role := "push_rls_" + hex.EncodeToString(suffix[:])
		ident := pgx.Identifier{role}.Sanitize()
		e.exec(`CREATE ROLE ` + ident + ` LOGIN IN ROLE synchro_app`)
		t.Cleanup(func() {
			ctx := context.Background()
			_, _ = e.db.Pool.Exec(ctx, `DROP OWNED BY `+ident)
			_, _ = e.db.Pool.Exec(ctx, `DROP ROLE `+ident)
		})
		e.exec(`GRANT SELECT, INSERT, UPDATE, DELETE ON public.owned TO ` + ident)
		e.exec(`INSERT INTO public.owned (id, owner, body) VALUES (50, 'someone_else', 'theirs')`)
		theirs := e.version("owned", "50")

		conn, err := e.db.Pool.Acquire(e.ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(e.ctx, `SET ROLE `+ident)
		require.NoError(t, err)
		defer func() {
			_, err := conn.Exec(context.Background(), `RESET ROLE`)
			require.NoError(t, err)
		}()

		ids := []string{pushID(), pushID(), pushID(), pushID(), pushID(), pushID()}
		raw, err := pushRawOn(e.ctx, conn, "c1", pushJSON(t,
			pushIns(ids[0], "owned", 1, pm{"body": "mine"}),
			pushIns(ids[1], "owned", 2, pm{"owner": "someone_else", "body": "forged"}),
			pushIns(ids[2], "owned", 3, pm{"owner": role, "body": "mine too"}),
			// A row the policy hides is absent to this caller: no version leaks.
			pushUpd(ids[3], "owned", 50, theirs, pm{"body": "stolen"}),
			pushIns(ids[4], "owned", 50, pm{"body": "stolen"}),
			pushDel(ids[5], "owned", 50, theirs),
		))
		require.NoError(t, err)
		res := pushParse(t, raw)
		require.Len(t, res, 6)
		v0 := pushAccepted(t, res[0], ids[0], true)
		require.JSONEq(t, fmt.Sprintf(`{"id": 1, "owner": %q, "body": "mine"}`, role), string(res[0]["row"]))
		reason := pushRejected(t, res[1], ids[1], "42501")
		require.NotContains(t, reason, "someone_else")
		v2 := pushAccepted(t, res[2], ids[2], true)
		pushConflict(t, res[3], ids[3], "")
		pushConflict(t, res[4], ids[4], "")
		pushConflict(t, res[5], ids[5], "")
		require.NotContains(t, raw, theirs)

		_, err = conn.Exec(e.ctx, `RESET ROLE`)
		require.NoError(t, err)
		e.requireFence("c1", ids[0], "owned", "1", "insert", v0)
		e.requireFence("c1", ids[2], "owned", "3", "insert", v2)
		e.requireNoFence("c1", ids[1])
		e.requireNoFence("c1", ids[3])
		e.requireNoFence("c1", ids[4])
		e.requireNoFence("c1", ids[5])
		require.Equal(t, 2, e.count(`SELECT count(*) FROM synchro.write_fence`))
		require.Equal(t, 1, e.count(`SELECT count(*) FROM public.owned WHERE id = 50 AND body = 'theirs'`))
		require.Zero(t, e.count(`SELECT count(*) FROM public.owned WHERE id = 2`))
		require.Equal(t, theirs, e.version("owned", "50"))
	})
}

func TestPushWholeCallFailure(t *testing.T) {
	t.Parallel()

	t.Run("FenceOrder27000", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.pushFails(e.db.Pool, "c1", pushJSON(t,
			pushIns(pushID(), "echo", 1, pm{"n": 0}),
			pushIns(pushID(), "echo", 2, pm{"n": 42}),
		), "27000")
		require.Zero(t, e.count(`SELECT count(*) FROM public.echo`))
	})

	t.Run("LockTimeout55P03", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		v := e.version("items", "1")

		holder, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(context.Background()) }()
		_, err = holder.Exec(e.ctx, `SELECT 1 FROM public.items WHERE id = 1 FOR UPDATE`)
		require.NoError(t, err)

		conn, err := e.db.Pool.Acquire(e.ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(e.ctx, `SET lock_timeout = '100ms'`)
		require.NoError(t, err)
		defer func() { _, _ = conn.Exec(context.Background(), `RESET lock_timeout`) }()

		e.pushFails(conn, "c1", pushJSON(t,
			pushIns(pushID(), "items", 2, pm{"name": "first"}),
			pushUpd(pushID(), "items", 1, v, pm{"name": "locked"}),
		), "55P03")
		require.False(t, e.itemExists(2))
	})

	t.Run("EarlierMutationMakesLaterFail", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		v := e.version("items", "1")
		// The insert arms the BEFORE UPDATE trigger, which then changes the key of the
		// update's row: 0A000, not a rejection, so the insert must not stay written.
		e.pushFails(e.db.Pool, "c1", pushJSON(t,
			pushIns(pushID(), "items", 2, pm{"name": "armer", "note": "arm"}),
			pushUpd(pushID(), "items", 1, v, pm{"note": "rekey"}),
		), "0A000")
		require.False(t, e.itemExists(2))
		// The same update alone is fine.
		id := pushID()
		res := e.push("c1", pushJSON(t, pushUpd(id, "items", 1, v, pm{"note": "rekey"})))
		pushAccepted(t, res[0], id, true)
	})
}

func TestPushIdempotency(t *testing.T) {
	t.Parallel()

	// The id's letter case is not content (a UUID is the same UUID in either case): a
	// retry that spells it in capitals replays the recorded outcome.
	t.Run("ReplayWithIDInOtherCase", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		raw1, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(id, "tags", "k", pm{"n": 1})))
		require.NoError(t, err)
		state := e.state(true)
		raw2, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(strings.ToUpper(id), "tags", "k", pm{"n": 1})))
		require.NoError(t, err)
		require.Equal(t, raw1, raw2)
		require.Equal(t, state, e.state(true), "a replay writes nothing")
	})

	// The key as the same row, spelled another way: a uuid key in capitals, an integer
	// key as 7.0. Both name the row the first push wrote, so a retry is a replay, not a
	// mutation "decided with different content" (SY410, before the twelfth session).
	t.Run("ReplayWithKeySpelledOtherwise", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		doc := "6f1c2e3a-9b8d-4c7e-a1f2-3b4c5d6e7f80"
		idD, idI := pushID(), pushID()
		raw1, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushIns(idD, "docs", doc, pm{"title": "t"}), pushIns(idI, "items", 7, pm{"name": "n"})))
		require.NoError(t, err)
		state := e.state(true)
		raw2, err := pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t,
			pushIns(idD, "docs", strings.ToUpper(doc), pm{"title": "t"}), pushIns(idI, "items", json.RawMessage("7.0"), pm{"name": "n"})))
		require.NoError(t, err)
		require.Equal(t, raw1, raw2)
		require.Equal(t, state, e.state(true), "a replay writes nothing")
		// Another row under the same id is still other content.
		_, err = pushRawOn(e.ctx, e.db.Pool, "c1", pushJSON(t, pushIns(idI, "items", 8, pm{"name": "n"})))
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe)
		require.Equal(t, "SY410", pe.Code)
	})

	// An outcome recorded by an earlier release holds the hash of the content with the
	// key as it was sent (the legacy hash): its replay, spelled the same, still matches.
	t.Run("ReplayOfOutcomeRecordedWithLegacyHash", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		m := pushIns(id, "docs", "6F1C2E3A-9B8D-4C7E-A1F2-3B4C5D6E7F80", pm{"title": "t"})
		call := pushJSON(t, m)
		raw1, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
		require.NoError(t, err)
		e.exec(`UPDATE synchro.mutation_outcome
		           SET content_hash = sha256(convert_to(($1::jsonb -> 0 || jsonb_build_object('id', lower($1::jsonb -> 0 ->> 'id')))::text, 'UTF8'))
		         WHERE mutation_id = $2::uuid`, call, id)
		raw2, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
		require.NoError(t, err)
		require.Equal(t, raw1, raw2)
	})

	t.Run("ReplayIsByteIdentical", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		v1 := e.version("items", "1")
		call := pushJSON(t,
			pushIns(pushID(), "items", 2, pm{"name": "beta"}),
			pushUpd(pushID(), "items", 1, "0123456789abcdef0123456789abcdef", pm{"name": "stale"}),
			pushIns(pushID(), "items", 3, pm{"name": "bad", "qty": -1}),
			pushDel(pushID(), "items", 1, v1),
			pushUpd(pushID(), "items", 5, v1, pm{"name": "absent"}),
		)
		raw1, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
		require.NoError(t, err)
		res := pushParse(t, raw1)
		require.Len(t, res, 5)
		require.Equal(t, []string{"accepted", "conflict", "rejected", "accepted", "conflict"},
			[]string{res[0].str(t, "status"), res[1].str(t, "status"), res[2].str(t, "status"),
				res[3].str(t, "status"), res[4].str(t, "status")})
		state := e.state(true)

		raw2, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
		require.NoError(t, err)
		require.Equal(t, raw1, raw2)
		require.Equal(t, state, e.state(true), "a replay writes nothing")

		// The recorded outcome, not a new evaluation, even after the rows changed.
		e.exec(`UPDATE public.items SET name = 'changed' WHERE id = 2`)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'again')`)
		state = e.state(true)
		raw3, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
		require.NoError(t, err)
		require.Equal(t, raw1, raw3)
		require.Equal(t, state, e.state(true), "a replay writes nothing")
		require.Equal(t, 2, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	t.Run("SameContentWithOtherKeyOrder", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		raw1, err := pushRawOn(e.ctx, e.db.Pool, "c1",
			`[{"id": "`+id+`", "table": "tags", "op": "insert", "pk": "a", "row": {"n": 1}}]`)
		require.NoError(t, err)
		state := e.state(true)
		raw2, err := pushRawOn(e.ctx, e.db.Pool, "c1",
			`[ {"row":{"n":1},"pk":"a","op":"insert","table":"tags","id":"`+id+`"} ]`)
		require.NoError(t, err)
		require.Equal(t, raw1, raw2)
		require.Equal(t, state, e.state(true))
	})

	t.Run("ReplayMixedWithNew", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		old := pushIns(pushID(), "tags", "a", pm{"n": 1})
		res := e.push("c1", pushJSON(t, old))
		va := pushAccepted(t, res[0], old["id"].(string), true)
		fresh := pushIns(pushID(), "tags", "b", pm{"n": 2})
		res = e.push("c1", pushJSON(t, old, fresh))
		require.Equal(t, va, pushAccepted(t, res[0], old["id"].(string), true))
		vb := pushAccepted(t, res[1], fresh["id"].(string), true)
		e.requireFence("c1", old["id"].(string), "tags", "a", "insert", va)
		e.requireFence("c1", fresh["id"].(string), "tags", "b", "insert", vb)
		require.Equal(t, va, e.version("tags", "a"))
	})

	t.Run("DifferentContentSY410", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1})))
		pushAccepted(t, res[0], id, true)
		e.pushFails(e.db.Pool, "c1", pushJSON(t, pushIns(id, "tags", "a", pm{"n": 2})), "SY410")
		// Even when the first decision was a conflict or the new content is another op.
		e.pushFails(e.db.Pool, "c1", pushJSON(t, pushDel(id, "tags", "a", e.version("tags", "a"))), "SY410")
	})

	t.Run("DifferentContentMixedWithNewSY410", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1})))
		pushAccepted(t, res[0], id, true)
		e.pushFails(e.db.Pool, "c1", pushJSON(t,
			pushIns(pushID(), "tags", "new-before", pm{"n": 1}),
			pushIns(id, "tags", "a", pm{"n": 2}),
			pushIns(pushID(), "tags", "new-after", pm{"n": 1}),
		), "SY410")
		require.Equal(t, 1, e.count(`SELECT count(*) FROM public.tags`))
	})

	t.Run("OtherClientIsOtherMutation", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1})))
		va := pushAccepted(t, res[0], id, true)
		// Same id and content from c2: evaluated afresh (the row exists now), not c1's outcome.
		res = e.push("c2", pushJSON(t, pushIns(id, "tags", "a", pm{"n": 1})))
		pushConflict(t, res[0], id, va)
		// Same id, other content, from c3: no SY410, applied.
		res = e.push("c3", pushJSON(t, pushIns(id, "tags", "b", pm{"n": 2})))
		vb := pushAccepted(t, res[0], id, true)
		e.requireFence("c1", id, "tags", "a", "insert", va)
		e.requireNoFence("c2", id)
		e.requireFence("c3", id, "tags", "b", "insert", vb)
		require.Equal(t, 3, e.count(`SELECT count(*) FROM synchro.mutation_outcome WHERE mutation_id = $1`, id))
	})
}

func TestPushMalformed(t *testing.T) {
	t.Parallel()
	const off = "zz-offending-zz"
	ok := func() pm { return pushIns(pushID(), "tags", "first-ok", pm{"n": 1}) }
	thousandOne := func() []any {
		ms := make([]any, 1001)
		for i := range ms {
			ms[i] = pushIns(pushID(), "tags", fmt.Sprintf("t%d", i), nil)
		}
		return ms
	}
	dupID := pushID()
	cases := []struct {
		name      string
		client    any
		mutations any
		offending string
	}{
		{"NotAnArray", "c1", `{"id": "` + off + `"}`, off},
		{"ArrayOfScalars", "c1", `["` + off + `"]`, off},
		{"NullMutations", "c1", nil, ""},
		{"EmptyArray", "c1", `[]`, ""},
		{"TooManyItems", "c1", pushJSON(t, thousandOne()...), ""},
		{"MissingID", "c1", pushJSON(t, ok(), pm{"table": "tags", "op": "insert", "pk": "x"}), ""},
		{"InvalidID", "c1", pushJSON(t, ok(), pm{"id": off, "table": "tags", "op": "insert", "pk": "x"}), off},
		{"IDNotAString", "c1", pushJSON(t, ok(), pm{"id": 31337, "table": "tags", "op": "insert", "pk": "x"}), "31337"},
		{"DuplicateID", "c1", pushJSON(t, pushIns(dupID, "tags", "x", nil), pushIns(dupID, "tags", "y", nil)), dupID},
		{"DuplicateIDOtherCase", "c1", pushJSON(t, pushIns(dupID, "tags", "x", nil),
			pushIns(strings.ToUpper(dupID), "tags", "y", nil)), dupID},
		{"UnknownTable", "c1", pushJSON(t, ok(), pushIns(pushID(), "zz_offending_zz", "x", nil)), "zz_offending_zz"},
		{"MissingTable", "c1", pushJSON(t, ok(), pm{"id": pushID(), "op": "insert", "pk": "x"}), ""},
		{"UnknownOp", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": off, "pk": "x"}), off},
		{"MissingPK", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "insert"}), ""},
		{"StringPKForIntKey", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", off, pm{"name": "n"})), off},
		{"DigitStringPKForIntKey", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", "77", pm{"name": "n"})), ""},
		{"NumberPKForUUIDKey", "c1", pushJSON(t, ok(), pushIns(pushID(), "docs", 424242, nil)), "424242"},
		{"NumberPKForTextKey", "c1", pushJSON(t, ok(), pushIns(pushID(), "tags", 424242, nil)), "424242"},
		{"InvalidUUIDPK", "c1", pushJSON(t, ok(), pushIns(pushID(), "docs", off, nil)), off},
		{"NonIntegerPK", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", 5.25, pm{"name": "n"})), "5.25"},
		{"PKOutOfInt4Range", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", int64(2147483648), pm{"name": "n"})), "2147483648"},
		{"PKOutOfInt8Range", "c1", pushJSON(t, ok(), pushIns(pushID(), "children", json.Number("9223372036854775808"), nil)), "9223372036854775808"},
		{"BaseVersionOnInsert", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x",
			"base_version": off}), off},
		{"MissingBaseVersionOnUpdate", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "update", "pk": "x",
			"row": pm{"n": 1}}), ""},
		{"MissingBaseVersionOnDelete", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "x"}), ""},
		{"BaseVersionNotAString", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "x",
			"base_version": 8675309}), "8675309"},
		{"UnregisteredColumn", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", 1, pm{"name": "n", "hidden": off})), off},
		{"NonexistentColumn", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", 1, pm{"name": "n", "zz_offending_col": 1})), "zz_offending_col"},
		{"KeyRepeatedWithOtherValue", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", 1, pm{"id": 777777, "name": "n"})), "777777"},
		{"KeyRepeatedWithWrongType", "c1", pushJSON(t, ok(), pushIns(pushID(), "items", 1, pm{"id": off, "name": "n"})), off},
		{"StringKeyRepeatedWithOtherValue", "c1", pushJSON(t, ok(), pushIns(pushID(), "tags", "x", pm{"name": off})), off},
		{"RowOnDelete", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "delete", "pk": "x",
			"base_version": "0123456789abcdef0123456789abcdef", "row": pm{"n": off}}), off},
		{"RowNotAnObject", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x",
			"row": []string{off}}), off},
		{"UnknownField", "c1", pushJSON(t, ok(), pm{"id": pushID(), "table": "tags", "op": "insert", "pk": "x",
			"zz_offending_field": 1}), "zz_offending_field"},
		{"NullClientID", nil, pushJSON(t, ok()), ""},
		{"EmptyClientID", "", pushJSON(t, ok()), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := pushSetup(t)
			pgErr := e.pushFails(e.db.Pool, tc.client, tc.mutations, "SY400")
			if tc.offending != "" {
				text := pgErr.Message + "\n" + pgErr.Detail + "\n" + pgErr.Hint
				require.NotContains(t, text, tc.offending, "the error must not echo the offending value")
			}
			require.Zero(t, e.count(`SELECT count(*) FROM public.tags`))
			require.Zero(t, e.count(`SELECT count(*) FROM synchro.mutation_outcome`))
		})
	}

	t.Run("ThousandItemsAccepted", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		ms := thousandOne()[:1000]
		res := e.push("c1", pushJSON(t, ms...))
		require.Len(t, res, 1000)
		for i, o := range res {
			pushAccepted(t, o, ms[i].(pm)["id"].(string), true)
		}
		require.Equal(t, 1000, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})
}

// pushWaitForLock waits until backend pid waits for a lock.
func pushWaitForLock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, pid uint32) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`,
			int32(pid)).Scan(&waiting))
		if waiting {
			return
		}
		require.True(t, time.Now().Before(deadline), "backend %d never waited for a lock", pid)
		time.Sleep(10 * time.Millisecond)
	}
}

type pushAsync struct {
	raw string
	err error
}

// pushInBackground acquires a connection and runs one push on it in a goroutine; it
// returns the backend pid and the channel of the result.
func (e *pushEnv) pushInBackground(client, mutations string) (uint32, <-chan pushAsync) {
	e.t.Helper()
	conn, err := e.db.Pool.Acquire(e.ctx)
	require.NoError(e.t, err)
	pid := conn.Conn().PgConn().PID()
	ch := make(chan pushAsync, 1)
	go func() {
		defer conn.Release()
		raw, err := pushRawOn(context.Background(), conn, client, mutations)
		ch <- pushAsync{raw, err}
	}()
	return pid, ch
}

func pushAwait(t *testing.T, ch <-chan pushAsync) string {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r.raw
	case <-time.After(30 * time.Second):
		require.FailNow(t, "push never returned")
		return ""
	}
}

func pushRequireBlocked(t *testing.T, ch <-chan pushAsync) {
	t.Helper()
	select {
	case r := <-ch:
		require.FailNow(t, "push should block", "got %q, %v", r.raw, r.err)
	default:
	}
}

func TestPushConcurrency(t *testing.T) {
	t.Parallel()

	t.Run("SameBaseVersion", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		base := e.version("items", "1")

		txA, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(context.Background()) }()
		idA, idB := pushID(), pushID()
		rawA, err := pushRawOn(e.ctx, txA, "ca", pushJSON(t, pushUpd(idA, "items", 1, base, pm{"name": "from-a"})))
		require.NoError(t, err)
		vA := pushAccepted(t, pushParse(t, rawA)[0], idA, true)

		pid, ch := e.pushInBackground("cb", pushJSON(t, pushUpd(idB, "items", 1, base, pm{"name": "from-b"})))
		pushWaitForLock(t, e.ctx, e.db.Pool, pid)
		pushRequireBlocked(t, ch)
		require.NoError(t, txA.Commit(e.ctx))

		res := pushParse(t, pushAwait(t, ch))
		row := pushConflict(t, res[0], idB, vA)
		require.JSONEq(t, `{"id": 1, "name": "from-a", "qty": 7, "code": null, "note": null, "stamp": "stamped:alpha"}`, string(row))
		require.Equal(t, vA, e.version("items", "1"))
		e.requireFence("ca", idA, "items", "1", "update", vA)
		e.requireNoFence("cb", idB)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	t.Run("RacesDirectWrite", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
		base := e.version("items", "1")

		txA, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(context.Background()) }()
		_, err = txA.Exec(e.ctx, `UPDATE public.items SET name = 'direct' WHERE id = 1`)
		require.NoError(t, err)
		var vDirect string
		require.NoError(t, txA.QueryRow(e.ctx, `
			SELECT rv.version FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'items' AND rv.pk = '1'`).Scan(&vDirect))
		require.NotEqual(t, base, vDirect)

		idB := pushID()
		pid, ch := e.pushInBackground("cb", pushJSON(t, pushUpd(idB, "items", 1, base, pm{"name": "from-b"})))
		pushWaitForLock(t, e.ctx, e.db.Pool, pid)
		pushRequireBlocked(t, ch)
		require.NoError(t, txA.Commit(e.ctx))

		res := pushParse(t, pushAwait(t, ch))
		row := pushConflict(t, res[0], idB, vDirect)
		require.JSONEq(t, `{"id": 1, "name": "direct", "qty": 7, "code": null, "note": null, "stamp": "stamped:alpha"}`, string(row))
		require.Equal(t, vDirect, e.version("items", "1"))
		require.Zero(t, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	t.Run("InsertOfExistingRacesDirectUpdate", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)

		txA, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(context.Background()) }()
		_, err = txA.Exec(e.ctx, `UPDATE public.items SET name = 'direct' WHERE id = 1`)
		require.NoError(t, err)

		idB := pushID()
		pid, ch := e.pushInBackground("cb", pushJSON(t, pushIns(idB, "items", 1, pm{"name": "from-b"})))
		pushWaitForLock(t, e.ctx, e.db.Pool, pid)
		pushRequireBlocked(t, ch)
		require.NoError(t, txA.Commit(e.ctx))
		vDirect := e.version("items", "1")

		// The conflict carries the current version and the row of that same version.
		res := pushParse(t, pushAwait(t, ch))
		row := pushConflict(t, res[0], idB, vDirect)
		require.JSONEq(t, `{"id": 1, "name": "direct", "qty": 7, "code": null, "note": null, "stamp": "stamped:alpha"}`, string(row))
		require.Zero(t, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	t.Run("SameMutationConcurrently", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		call := pushJSON(t, pushIns(pushID(), "tags", "k", pm{"n": 1}), pushIns(pushID(), "tags", "j", pm{"n": 2}))
		txA, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(context.Background()) }()
		rawA, err := pushRawOn(e.ctx, txA, "c1", call)
		require.NoError(t, err)

		pid, ch := e.pushInBackground("c1", call)
		pushWaitForLock(t, e.ctx, e.db.Pool, pid)
		pushRequireBlocked(t, ch)
		require.NoError(t, txA.Commit(e.ctx))
		state := e.state(true)

		require.Equal(t, rawA, pushAwait(t, ch), "the second gets the recorded outcome")
		require.Equal(t, state, e.state(true), "and writes nothing")
		require.Equal(t, 2, e.count(`SELECT count(*) FROM synchro.write_fence`))
	})

	// The same at REPEATABLE READ and SERIALIZABLE: the second push's snapshot predates
	// the first's commit, so it cannot see the recorded outcome after the lock. It must
	// fail as a serialization failure (40001), which a client retries and then gets the
	// recorded outcome; it failed with the outcome table's 23505 (unique_violation),
	// which says "your data is wrong" and is not retried (found in the twelfth session).
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run("SameMutationConcurrently/"+strings.ReplaceAll(string(iso), " ", ""), func(t *testing.T) {
			t.Parallel()
			e := pushSetup(t)
			e.exec(`INSERT INTO public.items (id, name) VALUES (1, 'alpha')`)
			// Each outcome: accepted, and a conflict (a stale base version) that writes
			// nothing, so only the outcome table could tell the two pushes apart.
			for _, call := range []string{
				pushJSON(t, pushIns(pushID(), "tags", "k", pm{"n": 1})),
				pushJSON(t, pushUpd(pushID(), "items", 1, "0123456789abcdef0123456789abcdef", pm{"name": "beta"})),
			} {
				txA, err := e.db.Pool.Begin(e.ctx)
				require.NoError(t, err)
				defer func() { _ = txA.Rollback(context.Background()) }()
				rawA, err := pushRawOn(e.ctx, txA, "c1", call)
				require.NoError(t, err)

				txB, err := e.db.Pool.BeginTx(e.ctx, pgx.TxOptions{IsoLevel: iso})
				require.NoError(t, err)
				defer func() { _ = txB.Rollback(context.Background()) }()
				var pid uint32
				require.NoError(t, txB.QueryRow(e.ctx, `SELECT pg_backend_pid()`).Scan(&pid)) // takes the snapshot
				ch := make(chan pushAsync, 1)
				go func() {
					raw, err := pushRawOn(context.Background(), txB, "c1", call)
					ch <- pushAsync{raw, err}
				}()
				pushWaitForLock(t, e.ctx, e.db.Pool, pid)
				pushRequireBlocked(t, ch)
				require.NoError(t, txA.Commit(e.ctx))
				state := e.state(true)

				r := <-ch
				var pe *pgconn.PgError
				require.ErrorAs(t, r.err, &pe, "got %q", r.raw)
				require.Equal(t, "40001", pe.Code, pe.Message)
				require.NoError(t, txB.Rollback(e.ctx))
				raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", call)
				require.NoError(t, err)
				require.Equal(t, rawA, raw, "the retry gets the recorded outcome")
				require.Equal(t, state, e.state(true), "and writes nothing")
			}
		})
	}

	t.Run("InsertRacesInsert", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		txA, err := e.db.Pool.Begin(e.ctx)
		require.NoError(t, err)
		defer func() { _ = txA.Rollback(context.Background()) }()
		idA, idB := pushID(), pushID()
		rawA, err := pushRawOn(e.ctx, txA, "ca", pushJSON(t, pushIns(idA, "tags", "k", pm{"n": 1})))
		require.NoError(t, err)
		vA := pushAccepted(t, pushParse(t, rawA)[0], idA, true)

		pid, ch := e.pushInBackground("cb", pushJSON(t, pushIns(idB, "tags", "k", pm{"n": 2})))
		pushWaitForLock(t, e.ctx, e.db.Pool, pid)
		pushRequireBlocked(t, ch)
		require.NoError(t, txA.Commit(e.ctx))

		res := pushParse(t, pushAwait(t, ch))
		row := pushConflict(t, res[0], idB, vA)
		require.JSONEq(t, `{"name": "k", "n": 1}`, string(row))
		require.Equal(t, vA, e.version("tags", "k"))
		e.requireNoFence("cb", idB)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM synchro.write_fence`))
		e.requireNoPushContext()
	})
}

func TestPushRowImages(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	row := `{"at": "2024-01-02T03:04:05Z", "ts": "2024-01-02T03:04:05", "d": "2024-01-02",
		"f": 0.30000000000000004, "iv": "1 day 02:03:04", "amount": 12.50, "doc": {"b": [1, 2.50], "a": "x"}}`
	mut := func(id string, pk int) string {
		return fmt.Sprintf(`[{"id": %q, "table": "measures", "op": "insert", "pk": %d, "row": %s}]`, id, pk, row)
	}
	fields := func(o pushOut) map[string]string {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(o["row"], &m))
		out := map[string]string{}
		for k, v := range m {
			if k != "id" {
				out[k] = string(v)
			}
		}
		return out
	}

	// Default session settings.
	idDef := pushID()
	def := e.push("c1", mut(idDef, 1))
	pushAccepted(t, def[0], idDef, true)
	want := fields(def[0])
	require.Equal(t, `"2024-01-02T03:04:05+00:00"`, want["at"])
	require.Equal(t, `"2024-01-02T03:04:05"`, want["ts"])
	require.Equal(t, `"2024-01-02"`, want["d"])
	require.Equal(t, `0.30000000000000004`, want["f"])
	require.Equal(t, `"1 day 02:03:04"`, want["iv"])
	require.Equal(t, `12.50`, want["amount"])

	// Odd session settings on a dedicated connection.
	conn, err := e.db.Pool.Acquire(e.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(e.ctx, `SET TimeZone = 'America/New_York'; SET DateStyle = 'SQL, DMY';
		SET IntervalStyle = 'iso_8601'; SET extra_float_digits = 0`)
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), `RESET ALL`) }()

	idOdd := pushID()
	raw, err := pushRawOn(e.ctx, conn, "c1", mut(idOdd, 2))
	require.NoError(t, err)
	odd := pushParse(t, raw)
	pushAccepted(t, odd[0], idOdd, true)
	require.Equal(t, want, fields(odd[0]))

	// A conflict's row and an update's row render the same way too.
	idConf := pushID()
	raw, err = pushRawOn(e.ctx, conn, "c1", mut(idConf, 1))
	require.NoError(t, err)
	conf := pushParse(t, raw)
	pushConflict(t, conf[0], idConf, e.version("measures", "1"))
	require.Equal(t, want, fields(conf[0]))
	idUpd := pushID()
	raw, err = pushRawOn(e.ctx, conn, "c1", pushJSON(t, pushUpd(idUpd, "measures", 2, e.version("measures", "2"), pm{"amount": json.Number("12.50")})))
	require.NoError(t, err)
	upd := pushParse(t, raw)
	pushAccepted(t, upd[0], idUpd, true)
	require.Equal(t, want, fields(upd[0]))

	// The caller's settings are its own again afterwards.
	var tz, ds, is, efd string
	require.NoError(t, conn.QueryRow(e.ctx,
		`SELECT current_setting('TimeZone'), current_setting('DateStyle'), current_setting('IntervalStyle'),
		        current_setting('extra_float_digits')`).Scan(&tz, &ds, &is, &efd))
	require.Equal(t, []string{"America/New_York", "SQL, DMY", "iso_8601", "0"}, []string{tz, ds, is, efd})
}

func TestPushKeys(t *testing.T) {
	t.Parallel()

	t.Run("Int4", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushIns(id, "items", 5, pm{"name": "five"})))
		v := pushAccepted(t, res[0], id, true)
		require.JSONEq(t, `5`, string(pushField(t, res[0]["row"], "id")))
		require.Equal(t, v, e.version("items", "5"))
		e.requireFence("c1", id, "items", "5", "insert", v)
		// An integral number in another spelling names the same key.
		id2 := pushID()
		res = e.push("c1", pushJSON(t, pushUpd(id2, "items", json.Number("5.0"), v, pm{"qty": 1})))
		v2 := pushAccepted(t, res[0], id2, true)
		e.requireFence("c1", id2, "items", "5", "update", v2)
		id3 := pushID()
		res = e.push("c1", pushJSON(t, pushIns(id3, "items", -7, pm{"name": "neg"})))
		v3 := pushAccepted(t, res[0], id3, true)
		e.requireFence("c1", id3, "items", "-7", "insert", v3)
	})

	t.Run("Int8", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id := pushID()
		const big = "9007199254740993" // not exact as a float64
		res := e.push("c1", pushJSON(t, pushIns(id, "children", json.Number(big), nil)))
		v := pushAccepted(t, res[0], id, true)
		require.Equal(t, big, string(pushField(t, res[0]["row"], "id")))
		require.Equal(t, v, e.version("children", big))
		e.requireFence("c1", id, "children", big, "insert", v)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM public.children WHERE id = `+big))
	})

	t.Run("UUIDLowercase", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		const upper = "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
		lower := strings.ToLower(upper)
		id := pushID()
		res := e.push("c1", pushJSON(t, pushIns(id, "docs", upper, pm{"id": upper, "title": "t"})))
		v := pushAccepted(t, res[0], id, true)
		require.JSONEq(t, `{"id": "`+lower+`", "title": "t"}`, string(res[0]["row"]))
		require.Equal(t, v, e.version("docs", lower))
		e.requireFence("c1", id, "docs", lower, "insert", v)
		// The same key in either case.
		id2 := pushID()
		res = e.push("c1", pushJSON(t, pushUpd(id2, "docs", upper, v, pm{"title": "u"})))
		v2 := pushAccepted(t, res[0], id2, true)
		e.requireFence("c1", id2, "docs", lower, "update", v2)
		id3 := pushID()
		res = e.push("c1", pushJSON(t, pushIns(id3, "docs", lower, nil)))
		pushConflict(t, res[0], id3, v2)
	})

	t.Run("TextKeyKeepsCase", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id1, id2 := pushID(), pushID()
		res := e.push("c1", pushJSON(t,
			pushIns(id1, "tags", "Hello", pm{"n": 1}),
			pushIns(id2, "tags", "hello", pm{"n": 2})))
		v1 := pushAccepted(t, res[0], id1, true)
		v2 := pushAccepted(t, res[1], id2, true)
		e.requireFence("c1", id1, "tags", "Hello", "insert", v1)
		e.requireFence("c1", id2, "tags", "hello", "insert", v2)
	})

	// '' is a text key PostgreSQL accepts: a push writes it like any other.
	t.Run("TextKeyEmpty", func(t *testing.T) {
		t.Parallel()
		e := pushSetup(t)
		id1, id2, id3 := pushID(), pushID(), pushID()
		res := e.push("c1", pushJSON(t, pushIns(id1, "tags", "", pm{"n": 1})))
		v1 := pushAccepted(t, res[0], id1, true)
		e.requireFence("c1", id1, "tags", "", "insert", v1)
		res = e.push("c1", pushJSON(t, pushUpd(id2, "tags", "", v1, pm{"n": 2})))
		v2 := pushAccepted(t, res[0], id2, true)
		e.requireFence("c1", id2, "tags", "", "update", v2)
		res = e.push("c1", pushJSON(t, pushDel(id3, "tags", "", v2)))
		v3 := pushAccepted(t, res[0], id3, false)
		e.requireFence("c1", id3, "tags", "", "delete", v3)
		require.Equal(t, 0, e.count(`SELECT count(*) FROM public.tags`))
	})
}

func pushField(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(obj, &m))
	v, ok := m[key]
	require.True(t, ok, "%s has %q", obj, key)
	return v
}

// Push's accepted "row" must be the stored row after defaults and triggers, the row of
// the returned version. An application AFTER INSERT trigger that sorts after the fence
// and updates the just-inserted row gives the row a second fence (under push, so the
// outcome's version is that second one), and push returned the RETURNING image of the
// INSERT, taken before AFTER triggers ran: the version and the row disagreed.
func TestPushAcceptedRowIsTheStoredRow(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE public.bump (id int4 PRIMARY KEY, n int4 NOT NULL DEFAULT 0);
		CREATE FUNCTION public.bump_after() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  UPDATE public.bump SET n = n + 1 WHERE id = NEW.id;
		  RETURN NULL;
		END $$;
		-- "z_bump" sorts after "synchro_fence_insert": the insert's fence fires first.
		CREATE TRIGGER z_bump AFTER INSERT ON public.bump
		  FOR EACH ROW EXECUTE FUNCTION public.bump_after();
		SELECT synchro.register_table('public.bump', 'bump');
		SELECT synchro.activate_registry();`)
	id := pushID()
	raw, err := pushRawOn(ctx, db.Pool, "c1", pushJSON(t, pushIns(id, "bump", 1, nil)))
	require.NoError(t, err)
	res := pushParse(t, raw)
	version := pushAccepted(t, res[0], id, true)

	var stored, current string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_jsonb(b)::text FROM public.bump b WHERE id = 1`).Scan(&stored))
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT rv.version FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
		 WHERE r.table_id = 'bump' AND rv.pk = '1'`).Scan(&current))
	require.Equal(t, current, version, "the accepted version is the row's current version")
	require.JSONEq(t, stored, string(res[0]["row"]),
		"accepted version %s comes with a row image that is not the stored row of that version", version)
}

// A mutation id already decided for this client, replayed with the same content, must
// return its recorded outcome (CONTRACT.md, Push: "Outcomes are kept as long as the
// client exists"). _push_prepare validated the mutation against the current registry
// before it looked the outcome up, so after an operator's registry change the retry of
// an accepted mutation failed with SY400 instead of replaying "accepted". Narrowed
// columns, then the table unregistered; other content stays SY400.
func TestPushReplayAfterRegistryChange(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE public.notes (id int4 PRIMARY KEY, body text, extra text);
		SELECT synchro.register_table('public.notes', 'notes');
		SELECT synchro.activate_registry();`)
	id := pushID()
	mutation := pushJSON(t, pushIns(id, "notes", 1, pm{"body": "b", "extra": "x"}))
	first, err := pushRawOn(ctx, db.Pool, "c1", mutation)
	require.NoError(t, err)
	require.Equal(t, "accepted", pushParse(t, first)[0].str(t, "status"))

	// The operator narrows the registered columns (docs/sql/set_columns.md).
	mustExec(t, db, `
		SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'), ARRAY['id', 'body']::name[]);
		SELECT synchro.activate_registry();`)

	replay, err := pushRawOn(ctx, db.Pool, "c1", mutation)
	require.NoError(t, err, "a decided mutation replayed with the same content returns its recorded outcome")
	require.JSONEq(t, first, replay)
	// Other content under the same id, invalid now: the registry's SY400, as before.
	_, err = pushRawOn(ctx, db.Pool, "c1", pushJSON(t, pushIns(id, "notes", 1, pm{"body": "b", "extra": "y"})))
	requireSQLState(t, err, "SY400")
	// A mutation never decided, invalid now: SY400.
	_, err = pushRawOn(ctx, db.Pool, "c1", pushJSON(t, pushIns(pushID(), "notes", 2, pm{"extra": "x"})))
	requireSQLState(t, err, "SY400")

	// The table unregistered: still a replay, with the key as the client spells it.
	mustExec(t, db, `
		SELECT synchro.unregister_relation((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'));
		SELECT synchro.activate_registry();`)
	replay, err = pushRawOn(ctx, db.Pool, "c1", mutation)
	require.NoError(t, err)
	require.JSONEq(t, first, replay)
	_, err = pushRawOn(ctx, db.Pool, "c1", pushJSON(t, pushIns(pushID(), "notes", 3, pm{"body": "b"})))
	requireSQLState(t, err, "SY400")
}

// TestPushErrorNeverCarriesTheValue: a value the column's type refuses with a SQLSTATE
// outside the rejection classes (tsquery's and tsvector's parsers raise 42601,
// syntax_error, quoting their input) fails the whole call with that SQLSTATE, as
// CONTRACT.md says, but its message must not carry the value (found by review,
// 2026-12-05: it did). Nothing is written or recorded, so the call can be fixed.
func TestPushErrorNeverCarriesTheValue(t *testing.T) {
	t.Parallel()
	e := pushSetup(t)
	e.exec(`CREATE TABLE public.searchdocs (id int8 PRIMARY KEY, q tsquery, v tsvector);
		SELECT synchro.register_table('public.searchdocs', 'searchdocs');
		SELECT synchro.activate_registry();`)
	const secret = "SENTINEL-3c9d1e"
	for i, row := range []string{`{"q": "` + secret + ` &"}`, `{"v": "` + secret + `:"}`} {
		_, err := pushRawOn(e.ctx, e.db.Pool, "c1", fmt.Sprintf(
			`[{"id": %q, "table": "searchdocs", "op": "insert", "pk": 1, "row": %s}]`, mutationID(5, i+1), row))
		pgErr := requireSQLState(t, err, "42601")
		require.NotContains(t, pgErr.Message+pgErr.Detail+pgErr.Hint+pgErr.Where, secret, row)
		require.Contains(t, pgErr.Message, mutationID(5, i+1), "the message names the mutation")
	}
	require.Zero(t, countOf(t, e.db, `SELECT count(*) FROM public.searchdocs`))
	require.Zero(t, countOf(t, e.db, `SELECT count(*) FROM synchro.mutation_outcome`))
	// The pack's own errors keep their message (27000 and 0A000 are tested with it).
	raw, err := pushRawOn(e.ctx, e.db.Pool, "c1", fmt.Sprintf(
		`[{"id": %q, "table": "searchdocs", "op": "insert", "pk": 1, "row": {"q": "a & b"}}]`, mutationID(5, 9)))
	require.NoError(t, err)
	require.Contains(t, raw, `"accepted"`)
}

package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/tests/testdb"
)

// These tests run the client against the real SQL pack. Without the WAL runner no
// write after the baseline is ever materialized, so they cover what the baseline
// alone serves: rebuild (paging, checksum against the server's), pull from the
// rebuild cursor, SY403, SY400 and SY503. Push → pull round trips are in
// e2e_test.go, which needs the runner.

const serverSchema = `
CREATE TABLE public.items (id int8 PRIMARY KEY, owner text NOT NULL, name text NOT NULL);
CREATE TABLE public.notes (id text PRIMARY KEY, owner text NOT NULL, body text);
SELECT synchro.register_table('public.items', 'items');
SELECT synchro.register_table('public.notes', 'notes');
SELECT synchro.add_scope_rule('items', 'user:', 'owner');
SELECT synchro.add_scope_rule('notes', 'user:', 'owner');
SELECT synchro.activate_registry();
INSERT INTO public.items SELECT i, CASE WHEN i % 3 = 0 THEN 'bob' ELSE 'alice' END, 'item ' || i FROM generate_series(1, 12) i;
INSERT INTO public.notes VALUES ('n-10', 'alice', 'ten'), ('n-9', 'alice', NULL), ('n-b', 'bob', 'b');
CREATE FUNCTION public.no_carol(client_id text, scope text) RETURNS boolean LANGUAGE sql
  SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$ SELECT scope <> 'user:carol' $$;
ALTER FUNCTION public.no_carol(text, text) OWNER TO synchro_operator;
`

// setup creates and registers the schema and sets the scope authorizer.
func setup(t *testing.T, db *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, serverSchema)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `SELECT synchro.set_scope_authorizer('public.no_carol(text, text)')`)
	require.NoError(t, err)
}

// baseline does the runner's first start by hand: a pgoutput slot with an exported
// snapshot, and synchro.runner_baseline in the REPEATABLE READ transaction that
// imported it. Nothing streams afterwards.
func baseline(t *testing.T, db *testdb.DB) {
	t.Helper()
	ctx := context.Background()
	repl, err := pgconn.Connect(ctx, db.ReplicationURL())
	require.NoError(t, err)
	defer repl.Close(ctx)
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, db.Name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT"})
	require.NoError(t, err)

	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+slot.SnapshotName+"'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT synchro.runner_baseline($1, 'pgoutput', $2::pg_lsn)`, db.Name, slot.ConsistentPoint)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
}

func serverClient(t *testing.T, db *testdb.DB, id string, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{
		DB:              db.Pool,
		StorePath:       ":memory:",
		ClientID:        id,
		Logger:          quietLogger(),
		PageSize:        3,
		RebuildPageSize: 2,
		Backoff:         client.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 3},
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestServerRebuildBeforeTheStreamStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	setup(t, db)
	c := serverClient(t, db, "early", nil)
	require.NoError(t, c.Subscribe(ctx, "user:alice"))
	// No stream generation yet: SY503 until the runner's first start.
	err := c.Sync(ctx, "user:alice")
	require.ErrorIs(t, err, client.ErrCapturePending)
	require.Equal(t, "<none>", cursorOf(t, c, "user:alice"))
}

func TestServerRebuildAndPull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	setup(t, db)
	baseline(t, db)

	c := serverClient(t, db, "device-1", nil)
	for _, scope := range []string{"user:alice", "user:bob"} {
		require.NoError(t, c.Subscribe(ctx, scope))
		require.NoError(t, c.Sync(ctx, scope), scope)
	}
	// What the server lists, in one page, compared with the replica.
	for _, scope := range []string{"user:alice", "user:bob"} {
		var raw []byte
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.rebuild('check', $1, NULL, 10000)::text`, scope).Scan(&raw))
		var page struct {
			Rows []struct {
				Table   string          `json:"table"`
				PK      json.RawMessage `json:"pk"`
				Version string          `json:"version"`
				Row     json.RawMessage `json:"row"`
			} `json:"rows"`
			Checksum string `json:"checksum"`
		}
		require.NoError(t, json.Unmarshal(raw, &page))
		var want []client.Row
		for _, r := range page.Rows {
			k, err := client.KeyText(r.PK)
			require.NoError(t, err)
			want = append(want, client.Row{Table: r.Table, PK: k, Version: r.Version, Data: r.Row})
		}
		// The server's checksum is the package's over the server's order.
		require.Equal(t, page.Checksum, client.Checksum(want), scope)
		got, err := c.Rows(ctx, scope)
		require.NoError(t, err)
		require.ElementsMatch(t, keys(want), keys(got), scope)
		for _, w := range want {
			r, ok, err := c.Row(ctx, w.Table, w.PK)
			require.NoError(t, err)
			require.True(t, ok)
			require.JSONEq(t, string(w.Data), string(r.Data))
		}
	}
	alice, err := c.Rows(ctx, "user:alice")
	require.NoError(t, err)
	require.Len(t, alice, 8+2)
	r, ok, err := c.Row(ctx, "items", 10)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"id": 10, "owner": "alice", "name": "item 10"}`, string(r.Data))

	// A second Sync pulls from the saved cursor: nothing new, no rebuild.
	cur := cursorOf(t, c, "user:alice")
	require.NoError(t, c.Sync(ctx, "user:alice"))
	require.Equal(t, cur, cursorOf(t, c, "user:alice"), "a quiet scope keeps its cursor")

	// A forged cursor is SY400, returned as is.
	_, err = client.Store(c).Exec(`UPDATE scopes SET cursor = 'forged' WHERE scope = 'user:alice'`)
	require.NoError(t, err)
	err = c.Sync(ctx, "user:alice")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SY400", pgErr.Code)

	// A cursor of another scope is misbound: SY400 as well.
	bobCur := cursorOf(t, c, "user:bob")
	_, err = client.Store(c).Exec(`UPDATE scopes SET cursor = ? WHERE scope = 'user:alice'`, bobCur)
	require.NoError(t, err)
	require.ErrorAs(t, c.Sync(ctx, "user:alice"), &pgErr)
	require.Equal(t, "SY400", pgErr.Code)
}

func TestServerChecksumTamper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	setup(t, db)
	baseline(t, db)

	for _, tc := range []struct {
		name   string
		tamper func(*client.Row)
	}{
		{"version", func(r *client.Row) { r.Version += "x" }},
		{"key", func(r *client.Row) { r.PK = "0" + r.PK }},
		{"table", func(r *client.Row) { r.Table = "notes" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serverClient(t, db, "tamper-"+tc.name, func(cfg *client.Config) {
				cfg.Hooks.TamperRebuildRow = func(r *client.Row) {
					if r.Table == "items" && r.PK == "4" {
						tc.tamper(r)
					}
				}
			})
			require.NoError(t, c.Subscribe(ctx, "user:alice"))
			require.ErrorIs(t, c.Sync(ctx, "user:alice"), client.ErrChecksumMismatch)
			requireScope(t, c, "user:alice")
			require.Equal(t, "<none>", cursorOf(t, c, "user:alice"))
		})
	}
}

func TestServerScopeDeniedAndCapturePending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	setup(t, db)
	baseline(t, db)

	c := serverClient(t, db, "device-2", nil)
	require.NoError(t, c.Subscribe(ctx, "user:carol"))
	require.ErrorIs(t, c.Sync(ctx, "user:carol"), client.ErrScopeDenied)

	require.NoError(t, c.Subscribe(ctx, "user:alice"))
	require.NoError(t, c.Sync(ctx, "user:alice"))
	before, err := c.Rows(ctx, "user:alice")
	require.NoError(t, err)

	// An accepted push: the replica is untouched, and without a runner to
	// materialize it the client's pull stays capture_pending.
	base := before[0].Version
	res, err := c.Push(ctx, []client.Mutation{
		{ID: "0b9c7e1e-3f0a-4f59-9a43-7b2f3c1d0a01", Table: "items", Op: "insert", PK: 100, Row: map[string]any{"owner": "alice", "name": "new"}},
		{ID: "0b9c7e1e-3f0a-4f59-9a43-7b2f3c1d0a02", Table: before[0].Table, Op: "update", PK: json.RawMessage(before[0].PK), BaseVersion: &base, Row: map[string]any{"name": "renamed"}},
		{ID: "0b9c7e1e-3f0a-4f59-9a43-7b2f3c1d0a03", Table: "items", Op: "update", PK: 2, BaseVersion: &base, Row: map[string]any{"name": "stale"}},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, "accepted", res[0].Status, "%+v", res[0])
	require.NotEmpty(t, res[0].Version)
	require.JSONEq(t, `{"id": 100, "owner": "alice", "name": "new"}`, string(res[0].Row))
	require.Equal(t, "accepted", res[1].Status, "%+v", res[1])
	require.Equal(t, "conflict", res[2].Status, "%+v", res[2])
	requireRow(t, c, "items", 100, false)
	after, err := c.Rows(ctx, "user:alice")
	require.NoError(t, err)
	require.Equal(t, before, after)

	cur := cursorOf(t, c, "user:alice")
	err = c.Sync(ctx, "user:alice")
	require.ErrorIs(t, err, client.ErrCapturePending)
	require.Equal(t, cur, cursorOf(t, c, "user:alice"))

	// The same mutation id with other content: SY410.
	_, err = c.Push(ctx, []client.Mutation{
		{ID: "0b9c7e1e-3f0a-4f59-9a43-7b2f3c1d0a01", Table: "items", Op: "insert", PK: 100, Row: map[string]any{"owner": "alice", "name": "other"}},
	})
	require.ErrorIs(t, err, client.ErrIdempotencyConflict)

	// Another client is not gated by this client's pending push.
	other := serverClient(t, db, "device-3", nil)
	require.NoError(t, other.Subscribe(ctx, "user:alice"))
	require.NoError(t, other.Sync(ctx, "user:alice"))
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// End-to-end: the real pack, the real WAL runner in-process, and clients.

const e2eSchema = `
CREATE TABLE public.items (id int8 PRIMARY KEY, owner text NOT NULL, team text, name text NOT NULL);
SELECT synchro.register_table('public.items', 'items');
SELECT synchro.add_scope_rule('items', 'user:', 'owner');
SELECT synchro.add_scope_rule('items', 'team:', 'team');
SELECT synchro.activate_registry();
INSERT INTO public.items VALUES (1, 'alice', 'red', 'one'), (2, 'alice', NULL, 'two'), (3, 'bob', 'red', 'three');
`

// startRunner runs the WAL runner for db until the test ends and waits for its
// first start (the baseline).
func startRunner(t *testing.T, db *testdb.DB) {
	t.Helper()
	r, err := runner.New(runner.Config{
		DatabaseURL:     db.URL,
		Slot:            db.Name,
		Owner:           "client-e2e",
		Logger:          quietLogger(),
		StandbyInterval: time.Second,
		IdleInterval:    50 * time.Millisecond,
		PollInterval:    10 * time.Millisecond,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("runner: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("runner did not stop")
		}
	})
	require.Eventually(t, func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM synchro.progress`).Scan(&n)
		return n == 1
	}, 60*time.Second, 20*time.Millisecond, "runner baseline")
}

func e2eClient(t *testing.T, db *testdb.DB, id string) *client.Client {
	return serverClient(t, db, id, func(cfg *client.Config) {
		cfg.Backoff = client.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 400} // ~80 s: a loaded machine once took more than 10 s to materialize a write
	})
}

// e2eSync syncs scope and fails the test on an error.
func e2eSync(t *testing.T, c *client.Client, scope string) {
	t.Helper()
	require.NoError(t, c.Sync(context.Background(), scope), "sync %s", scope)
}

// syncUntil syncs scope until check holds (a direct write or another client's push is
// not gated by capture_pending, so it shows up whenever it is materialized).
func syncUntil(t *testing.T, c *client.Client, scope string, check func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		e2eSync(t, c, scope)
		if check() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("scope %s: %s: not reached in 30s", scope, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncUntilKeys syncs scope until the replica holds exactly want.
func syncUntilKeys(t *testing.T, c *client.Client, scope string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	syncUntil(t, c, scope, func() bool {
		rows, err := c.Rows(context.Background(), scope)
		require.NoError(t, err)
		return fmt.Sprint(keysNoVersion(rows)) == fmt.Sprint(want)
	}, fmt.Sprintf("want %v", want))
}

func keysNoVersion(rows []client.Row) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Table+"/"+r.PK)
	}
	return out
}

var mutationSeq atomic.Int64

func mutationID() string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", mutationSeq.Add(1))
}

func TestE2EPushPullConverges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, e2eSchema)
	require.NoError(t, err)
	startRunner(t, db)

	c := e2eClient(t, db, "phone")
	for _, s := range []string{"user:alice", "team:red"} {
		require.NoError(t, c.Subscribe(ctx, s))
		e2eSync(t, c, s)
	}
	requireScopeKeys(t, c, "user:alice", "items/1", "items/2")
	requireScopeKeys(t, c, "team:red", "items/1", "items/3")

	// Push an insert and an update; the replica does not change until pull brings
	// them back. This client's Sync waits out capture_pending by itself.
	one, ok, err := c.Row(ctx, "items", 1)
	require.NoError(t, err)
	require.True(t, ok)
	res, err := c.Push(ctx, []client.Mutation{
		{ID: mutationID(), Table: "items", Op: "insert", PK: 10, Row: map[string]any{"owner": "alice", "team": "red", "name": "ten"}},
		{ID: mutationID(), Table: "items", Op: "update", PK: 1, BaseVersion: &one.Version, Row: map[string]any{"name": "uno"}},
	})
	require.NoError(t, err)
	require.Equal(t, "accepted", res[0].Status, "%+v", res[0])
	require.Equal(t, "accepted", res[1].Status, "%+v", res[1])
	requireRow(t, c, "items", 10, false)

	e2eSync(t, c, "user:alice")
	requireScopeKeys(t, c, "user:alice", "items/1", "items/10", "items/2")
	got, _, err := c.Row(ctx, "items", 1)
	require.NoError(t, err)
	require.Equal(t, res[1].Version, got.Version)
	require.JSONEq(t, `{"id": 1, "owner": "alice", "team": "red", "name": "uno"}`, string(got.Data))
	e2eSync(t, c, "team:red")
	requireScopeKeys(t, c, "team:red", "items/1", "items/10", "items/3")

	// Row 1 leaves user:alice (owner changes) but team:red still holds it.
	_, err = db.Pool.Exec(ctx, `UPDATE public.items SET owner = 'carol' WHERE id = 1`)
	require.NoError(t, err)
	syncUntilKeys(t, c, "user:alice", "items/10", "items/2")
	requireRow(t, c, "items", 1, true)
	// The team:red pull brings its new image.
	syncUntil(t, c, "team:red", func() bool {
		got, _, err = c.Row(ctx, "items", 1)
		require.NoError(t, err)
		return jsonField(t, got.Data, "owner") == "carol"
	}, "row 1 moved to carol")
	requireScopeKeys(t, c, "team:red", "items/1", "items/10", "items/3")
	require.JSONEq(t, `{"id": 1, "owner": "carol", "team": "red", "name": "uno"}`, string(got.Data))

	// Deleted at the source: gone from both scopes and from the replica.
	ten, _, err := c.Row(ctx, "items", 10)
	require.NoError(t, err)
	res, err = c.Push(ctx, []client.Mutation{{ID: mutationID(), Table: "items", Op: "delete", PK: 10, BaseVersion: &ten.Version}})
	require.NoError(t, err)
	require.Equal(t, "accepted", res[0].Status, "%+v", res[0])
	e2eSync(t, c, "user:alice")
	requireScopeKeys(t, c, "user:alice", "items/2")
	requireRow(t, c, "items", 10, true) // team:red has not pulled the delete yet
	e2eSync(t, c, "team:red")
	requireScopeKeys(t, c, "team:red", "items/1", "items/3")
	requireRow(t, c, "items", 10, false)

	// An operator retires the client id: its next push is refused for good.
	_, err = db.Pool.Exec(ctx, `SELECT synchro.retire_client('phone')`)
	require.NoError(t, err)
	_, err = c.Push(ctx, []client.Mutation{{ID: mutationID(), Table: "items", Op: "insert", PK: 11,
		Row: map[string]any{"owner": "alice", "team": "red", "name": "eleven"}}})
	require.ErrorIs(t, err, client.ErrClientRetired)
}

func TestE2EManyPagesAndCompactionRebuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, e2eSchema)
	require.NoError(t, err)
	startRunner(t, db)

	c := e2eClient(t, db, "laptop")
	require.NoError(t, c.Subscribe(ctx, "user:bob"))
	e2eSync(t, c, "user:bob")
	requireScopeKeys(t, c, "user:bob", "items/3")

	// 20 inserts and 5 deletes in separate transactions: pull pages of 3.
	for i := 100; i < 120; i++ {
		_, err := db.Pool.Exec(ctx, `INSERT INTO public.items VALUES ($1, 'bob', NULL, 'x')`, i)
		require.NoError(t, err)
	}
	_, err = db.Pool.Exec(ctx, `DELETE FROM public.items WHERE id BETWEEN 100 AND 104`)
	require.NoError(t, err)
	want := []string{}
	for _, k := range []string{"105", "106", "107", "108", "109", "110", "111", "112", "113", "114", "115", "116", "117", "118", "119", "3"} {
		want = append(want, "items/"+k)
	}
	syncUntilKeys(t, c, "user:bob", want...)

	// A second client falls behind, the stream is compacted past its cursor: SY409,
	// and its Sync rebuilds by itself.
	late := e2eClient(t, db, "tablet")
	require.NoError(t, late.Subscribe(ctx, "user:bob"))
	e2eSync(t, late, "user:bob")
	oldCursor := cursorOf(t, late, "user:bob")
	_, err = db.Pool.Exec(ctx, `UPDATE public.items SET name = 'changed' WHERE id = 3`)
	require.NoError(t, err)
	syncUntil(t, c, "user:bob", func() bool {
		got, _, err := c.Row(ctx, "items", 3)
		require.NoError(t, err)
		return jsonField(t, got.Data, "name") == "changed"
	}, "the update is materialized")
	var horizon *string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.compact('0 seconds') ->> 'horizon'`).Scan(&horizon))
	require.NotNil(t, horizon)

	// The old cursor is below the horizon now.
	_, err = db.Pool.Exec(ctx, `SELECT synchro.pull('tablet', 'user:bob', $1)`, oldCursor)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SY409", pgErr.Code)
	e2eSync(t, late, "user:bob")
	require.NotEqual(t, oldCursor, cursorOf(t, late, "user:bob"))
	requireScopeKeys(t, late, "user:bob", want...)
	got, _, err := late.Row(ctx, "items", 3)
	require.NoError(t, err)
	require.Equal(t, "changed", jsonField(t, got.Data, "name"))
}

func requireScopeKeys(t *testing.T, c *client.Client, scope string, want ...string) {
	t.Helper()
	rows, err := c.Rows(context.Background(), scope)
	require.NoError(t, err)
	require.Equal(t, want, keysNoVersion(rows), "scope %s", scope)
}

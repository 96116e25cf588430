package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testLog sends logs to the test log while the test runs.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startRunner runs Synchro's runner in-process on db until the test ends.
func startRunner(t *testing.T, url, dbName string) {
	t.Helper()
	slot := regexp.MustCompile(`[^a-z0-9_]`).ReplaceAllString(strings.ToLower(dbName), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	r, err := runner.New(runner.Config{
		DatabaseURL:       url,
		Slot:              slot,
		Owner:             "todo-test",
		HeartbeatInterval: 250 * time.Millisecond,
		StandbyInterval:   time.Second,
		ReceiveTimeout:    5 * time.Second,
		IdleInterval:      100 * time.Millisecond,
		PollInterval:      20 * time.Millisecond,
		BackoffMax:        300 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("runner did not stop")
		}
	})
}

// todoService is the example end to end: a database with Synchro installed, the todo
// migration applied, the runner running and the service on an httptest server.
func todoService(t *testing.T) (*testdb.DB, string) {
	t.Helper()
	ctx := context.Background()
	db := testdb.New(t)
	require.NoError(t, migrate(ctx, db.URL))
	require.NoError(t, migrate(ctx, db.URL), "the migration is applied once")
	startRunner(t, db.URL, db.Name)

	pool, err := newPool(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer((&Server{DB: pool, Users: map[string]string{"alice": "a-pw", "bob": "b-pw"}, Logger: logger}).Handler())
	t.Cleanup(srv.Close)
	return db, srv.URL
}

// serverTodos reads the user's todos from todo.todos as the table's owner.
func serverTodos(t *testing.T, db *testdb.DB, user string) map[string]todo {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT id::text, owner, title, done FROM todo.todos WHERE owner = $1`, user)
	require.NoError(t, err)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (todo, error) {
		var x todo
		return x, r.Scan(&x.ID, &x.Owner, &x.Title, &x.Done)
	})
	require.NoError(t, err)
	out := map[string]todo{}
	for _, x := range list {
		out[x.ID] = x
	}
	return out
}

// conflictRow decodes the current row a conflict carries.
func conflictRow(t *testing.T, r pushResult) todo {
	t.Helper()
	var x todo
	require.NoError(t, json.Unmarshal(r.Row, &x))
	return x
}

func statuses(rs []pushResult) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

// Two devices of one user edit offline, meet a conflict, resolve it and converge; a
// device that stayed away across a compaction rebuilds; another user's todos never
// reach them, and a forged scope is refused.
func TestTodoEndToEnd(t *testing.T) {
	t.Parallel()
	db, base := todoService(t)
	phone := newDevice(t, base, "alice", "a-pw", "phone")
	laptop := newDevice(t, base, "alice", "a-pw", "laptop")
	bobPhone := newDevice(t, base, "bob", "b-pw", "phone")

	// Unauthenticated and wrong-password calls are refused before any SQL runs.
	intruder := newDevice(t, base, "alice", "wrong", "phone")
	status, _ := intruder.call("/v1/pull", map[string]any{}, nil)
	require.Equal(t, http.StatusUnauthorized, status)

	// Online: the phone creates two todos; both devices see them.
	phone.sync()
	laptop.sync()
	require.Empty(t, phone.todos)
	milk := phone.create("Buy milk")
	taxes := phone.create("File taxes")
	sent := append([]mutation(nil), phone.outbox...)
	first := phone.push()
	require.Equal(t, []string{"accepted", "accepted"}, statuses(first))

	// The answer was lost on the way: the phone sends the same mutations again and gets
	// the recorded outcomes, nothing written twice. The same id with other content is
	// a client bug: 422, nothing written.
	phone.outbox = sent
	require.Equal(t, first, phone.push(), "a retried push returns the recorded outcomes")
	var ignored any
	status, name := phone.call("/v1/push", map[string]any{"mutations": []mutation{{"id": sent[0]["id"], "table": "todos",
		"op": "insert", "pk": sent[0]["pk"], "row": map[string]any{"id": sent[0]["pk"], "title": "Buy bread"}}}}, &ignored)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "idempotency_conflict", name)
	require.Len(t, serverTodos(t, db, "alice"), 2)
	phone.sync()
	laptop.sync()
	require.Len(t, laptop.todos, 2)
	require.Equal(t, phone.todos, laptop.todos)
	require.Equal(t, phone.versions, laptop.versions)

	// Offline on both: the phone renames milk and adds a todo, the laptop ticks milk
	// off and deletes taxes. Each works on its own replica.
	phone.update(milk, map[string]any{"title": "Buy oat milk"})
	plants := phone.create("Water the plants")
	laptop.update(milk, map[string]any{"done": true})
	laptop.remove(taxes)
	require.True(t, laptop.todos[milk].Done)
	require.Equal(t, "Buy milk", laptop.todos[milk].Title, "the laptop has not seen the rename")

	// Back online, the phone first: both of its mutations apply.
	require.Equal(t, []string{"accepted", "accepted"}, statuses(phone.push()))
	// Then the laptop: its update was made against the version the phone replaced,
	// so compare-and-swap refuses it and returns the current row; its delete of a row
	// nobody else touched applies.
	res := laptop.push()
	require.Equal(t, []string{"conflict", "accepted"}, statuses(res))
	current := conflictRow(t, res[0])
	require.Equal(t, "Buy oat milk", current.Title)
	require.False(t, current.Done)
	require.NotNil(t, res[0].Version)
	require.NotEqual(t, laptop.versions[milk], *res[0].Version)
	require.Equal(t, "Buy oat milk", serverTodos(t, db, "alice")[milk].Title, "the refused update wrote nothing")
	require.False(t, serverTodos(t, db, "alice")[milk].Done)

	// The laptop resolves it: its own change (done) on top of the current row, against
	// the current version.
	laptop.versions[milk] = *res[0].Version
	laptop.update(milk, map[string]any{"done": true})
	require.Equal(t, []string{"accepted"}, statuses(laptop.push()))

	// Both converge on the server's state: the rename and the tick, taxes gone, plants
	// there. The writer syncs first: its pull waits (503) until the stream has
	// materialized its own writes, so the other device's later pull sees them too.
	laptop.sync()
	phone.sync()
	want := serverTodos(t, db, "alice")
	require.Len(t, want, 2)
	require.Equal(t, todo{ID: milk, Owner: "alice", Title: "Buy oat milk", Done: true}, want[milk])
	require.Contains(t, want, plants)
	require.Equal(t, want, phone.todos)
	require.Equal(t, want, laptop.todos)
	require.Equal(t, phone.versions, laptop.versions)

	// Another user: bob's todos stay his.
	bobPhone.sync()
	require.Empty(t, bobPhone.todos, "bob sees none of alice's todos")
	dentist := bobPhone.create("Call the dentist")
	require.Equal(t, []string{"accepted"}, statuses(bobPhone.push()))
	bobPhone.sync()
	require.Equal(t, serverTodos(t, db, "bob"), bobPhone.todos)
	phone.sync()
	laptop.sync()
	require.NotContains(t, phone.todos, dentist)
	require.NotContains(t, laptop.todos, dentist)
	require.Equal(t, serverTodos(t, db, "alice"), phone.todos)

	// A forged scope: alice's device asks for bob's. The service passes it on and the
	// database's scope authorizer refuses it, for pull and for rebuild.
	status, name = phone.call("/v1/rebuild", map[string]any{"scope": "todos:bob"}, &ignored)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "scope_denied", name)
	status, name = phone.call("/v1/pull", map[string]any{"scope": "todos:bob"}, &ignored)
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, "scope_denied", name)
	// Alice's own cursor is bound to her scope: presented for bob's it is malformed.
	status, name = phone.call("/v1/pull", map[string]any{"scope": "todos:bob", "cursor": phone.cursor}, &ignored)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_argument", name)

	// A forged write: alice's device knows the id of bob's todo. Under the row-level
	// security policy push cannot see the row: a conflict with no current row, and
	// nothing written. Giving her own todo to bob is rejected by the policy (42501).
	phone.outbox = append(phone.outbox,
		mutation{"id": newUUID(t), "table": "todos", "op": "update", "pk": dentist, "base_version": bobPhone.versions[dentist],
			"row": map[string]any{"title": "Cancel the dentist"}},
		mutation{"id": newUUID(t), "table": "todos", "op": "delete", "pk": dentist, "base_version": bobPhone.versions[dentist]},
		mutation{"id": newUUID(t), "table": "todos", "op": "update", "pk": plants, "base_version": phone.versions[plants],
			"row": map[string]any{"owner": "bob"}})
	res = phone.push()
	require.Equal(t, []string{"conflict", "conflict", "rejected"}, statuses(res))
	require.Nil(t, res[0].Version, "a row the caller may not read is reported absent")
	require.JSONEq(t, "null", string(res[0].Row))
	require.Equal(t, "42501", res[2].Code)
	require.Equal(t, map[string]todo{dentist: {ID: dentist, Owner: "bob", Title: "Call the dentist"}}, serverTodos(t, db, "bob"))
	bobPhone.sync()
	require.Equal(t, serverTodos(t, db, "bob"), bobPhone.todos)

	// Compaction: the laptop stays away while the phone keeps editing; the operator
	// compacts the change stream down to nothing. The laptop's cursor is then below the
	// retention horizon: 409, and it rebuilds to the current state.
	phone.update(milk, map[string]any{"title": "Buy oat milk (2 l)"})
	phone.remove(plants)
	require.Equal(t, []string{"accepted", "accepted"}, statuses(phone.push()))
	phone.sync()
	var compacted struct {
		Deleted int64 `json:"deleted_effects"`
	}
	err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(context.Background(), `SET LOCAL ROLE synchro_operator`); err != nil {
			return err
		}
		return tx.QueryRow(context.Background(), `SELECT synchro.compact(interval '0')`).Scan(&compacted)
	})
	require.NoError(t, err)
	require.Positive(t, compacted.Deleted)

	before := laptop.rebuilds
	require.False(t, laptop.pull(), "a cursor below the retention horizon is rebuild_required")
	laptop.cursor = ""
	laptop.sync()
	require.Equal(t, before+1, laptop.rebuilds)
	want = serverTodos(t, db, "alice")
	require.Equal(t, map[string]todo{milk: {ID: milk, Owner: "alice", Title: "Buy oat milk (2 l)", Done: true}}, want)
	require.Equal(t, want, laptop.todos)
	phone.sync()
	require.Equal(t, want, phone.todos)
	require.Equal(t, phone.versions, laptop.versions)
}

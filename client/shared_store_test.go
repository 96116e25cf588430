package client_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/tests/testdb"
)

// pullGate holds back one successful pull response (network latency) while armed.
type pullGate struct {
	mu      sync.Mutex
	armed   bool
	arrived chan struct{}
	release chan struct{}
}

func (g *pullGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.arrived, g.release = true, make(chan struct{}), make(chan struct{})
}

// gatedRealRPC calls the real SQL functions on pool, as the client's own server calls
// do; a pull response is held back by gate while it is armed.
func gatedRealRPC(pool *pgxpool.Pool, gate *pullGate) func(ctx context.Context, fn string, args ...any) ([]byte, error) {
	return func(ctx context.Context, fn string, args ...any) ([]byte, error) {
		var q string
		switch fn {
		case "pull":
			q = `SELECT synchro.pull($1, $2, $3, $4)::text`
		case "rebuild":
			q = `SELECT synchro.rebuild($1, $2, $3, $4)::text`
		case "push":
			q = `SELECT synchro.push($1, $2::jsonb)::text`
		}
		var res string
		if err := pool.QueryRow(ctx, q, args...).Scan(&res); err != nil {
			return nil, err
		}
		if fn == "pull" && gate != nil {
			gate.mu.Lock()
			armed := gate.armed
			gate.armed = false
			gate.mu.Unlock()
			if armed {
				close(gate.arrived)
				<-gate.release
			}
		}
		return []byte(res), nil
	}
}

// Two Clients on one store file (client/doc.go: "Two Clients may open one store
// file"). B's Sync fetched its last pull page before A pushed; A's push is accepted and
// A's Sync waits out SY503 and fetches the page with the write. B applies its older
// page first; A's transfer finds the cursor moved (errMovedOn), and Sync returned nil
// ("another Sync of this store brought the scope up to date first") with A's own
// accepted write missing from the replica. Found by review 2026-12-05. Sync now pulls
// again from the cursor B saved.
func TestClientTwoInstancesMovedOnKeepsReadYourWrites(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, e2eSchema)
	require.NoError(t, err)
	startRunner(t, db)

	path := filepath.Join(t.TempDir(), "shared.db")
	gateA, gateB := &pullGate{}, &pullGate{}
	open := func(g *pullGate) *client.Client {
		c, err := client.OpenWithRPC(ctx, client.Config{StorePath: path, ClientID: "shared", Logger: quietLogger(),
			Backoff: client.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 400}},
			gatedRealRPC(db.Pool, g))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := open(gateA), open(gateB)
	require.NoError(t, a.Subscribe(ctx, "user:alice"))
	require.NoError(t, a.Sync(ctx, "user:alice"))
	requireScopeKeys(t, a, "user:alice", "items/1", "items/2")

	// Another scope's write materializes: the stream moves on (user:alice gets nothing).
	_, err = db.Pool.Exec(ctx, `INSERT INTO public.items VALUES (60, 'bob', NULL, 'other')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.projection WHERE pk = '60'`).Scan(&n)
		return n == 1
	}, 60*time.Second, 20*time.Millisecond)

	// B's Sync fetches its page (nothing new for user:alice) and is slow to apply it.
	gateB.arm()
	bDone := make(chan error, 1)
	go func() { bDone <- b.Sync(ctx, "user:alice") }()
	<-gateB.arrived

	// A pushes an insert into user:alice: accepted.
	res, err := a.Push(ctx, []client.Mutation{{ID: mutationID(), Table: "items", Op: "insert", PK: 50,
		Row: map[string]any{"owner": "alice", "name": "mine"}}})
	require.NoError(t, err)
	require.Equal(t, "accepted", res[0].Status)

	// A syncs after its push returned: it waits out SY503 and fetches the write.
	gateA.arm()
	aDone := make(chan error, 1)
	go func() { aDone <- a.Sync(ctx, "user:alice") }()
	<-gateA.arrived

	close(gateB.release)
	require.NoError(t, <-bDone)
	close(gateA.release)
	require.NoError(t, <-aDone, "A's Sync")

	// Sync returned nil after Push was accepted: the write must be in the replica.
	_, ok, err := a.Row(ctx, "items", 50)
	require.NoError(t, err)
	require.True(t, ok, "Sync returned nil, yet the replica lacks this client's accepted push (read-your-writes)")
}

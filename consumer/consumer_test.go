package consumer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/consumer"
	"github.com/synchro/synchro/internal/testrunner"
	"github.com/synchro/synchro/tests/testdb"
)

// The helper process of TestKilledConsumerRedeliversItsBatch runs a consumer and
// nothing else: no cluster of its own.
func TestMain(m *testing.M) {
	if os.Getenv("CONSUMER_TEST_HELPER_URL") != "" {
		os.Exit(helperConsumer())
	}
	testdb.Main(m)
}

const schema = `
CREATE TABLE public.items (id int8 PRIMARY KEY, owner text NOT NULL, v int NOT NULL DEFAULT 0);
SELECT synchro.register_table('public.items', 'items');
SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
SELECT synchro.activate_registry();
`

// consumerPool is a pool in role synchro_consumer.
func consumerPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.AfterConnect = setConsumerRole
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// txnChanges is every materialized transaction with changes, in commit order: its
// position and change ids.
func txnChanges(t testing.TB, db *testdb.DB) ([]string, map[string][]string) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT stream_generation::text || ':' || commit_lsn::text,
		       stream_generation::text || ':' || commit_lsn::text || ':' || event_ordinal::text
		  FROM synchro.change ORDER BY commit_lsn, event_ordinal`)
	require.NoError(t, err)
	defer rows.Close()
	var order []string
	ids := map[string][]string{}
	for rows.Next() {
		var pos, id string
		require.NoError(t, rows.Scan(&pos, &id))
		if len(order) == 0 || order[len(order)-1] != pos {
			order = append(order, pos)
		}
		ids[pos] = append(ids[pos], id)
	}
	require.NoError(t, rows.Err())
	return order, ids
}

func waitLagZero(t testing.TB, db *testdb.DB, group string, wantTxns int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var lag int64
		var txns int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT (SELECT lag_transactions FROM synchro.consumer_groups WHERE name = $1),
			       (SELECT count(DISTINCT commit_lsn) FROM synchro.change)`, group).Scan(&lag, &txns))
		if lag == 0 && txns >= wantTxns {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s: lag %d, %d of %d transactions materialized", group, lag, txns, wantTxns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Three groups at different paces (read sizes and handler speeds) over one stream,
// while the stream is being written: each sees every transaction exactly once (no
// crash here, so no redelivery), in commit order, with its change ids.
func TestThreeGroupsAtDifferentPaces(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema)
	require.NoError(t, err)
	testrunner.Start(t, db)
	pool := consumerPool(t, db.URL)

	type group struct {
		name  string
		maxTx int
		delay time.Duration
		mu    sync.Mutex
		seen  []consumer.Transaction
	}
	groups := []*group{{name: "fast", maxTx: 50}, {name: "medium", maxTx: 7, delay: 2 * time.Millisecond},
		{name: "slow", maxTx: 1, delay: 5 * time.Millisecond}}
	for _, g := range groups {
		_, err := db.Pool.Exec(context.Background(), `SELECT synchro.create_consumer_group($1)`, g.name)
		require.NoError(t, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- consumer.Run(ctx, consumer.Config{DB: pool, Group: g.name, MaxTransactions: g.maxTx,
				LeaseDuration: 5 * time.Second, PollInterval: 20 * time.Millisecond},
				func(ctx context.Context, b consumer.Batch) error {
					time.Sleep(g.delay)
					g.mu.Lock()
					defer g.mu.Unlock()
					g.seen = append(g.seen, b.Transactions...)
					return nil
				})
		}()
	}

	// The writer: 150 source transactions of one to three rows, inserts, updates and
	// deletes, while the groups consume.
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 150
	for i := range n {
		tx, err := db.Pool.Begin(context.Background())
		require.NoError(t, err)
		for k := range 1 + rng.IntN(3) {
			id := rng.IntN(40)
			switch rng.IntN(3) {
			case 0:
				_, err = tx.Exec(context.Background(), `DELETE FROM items WHERE id = $1`, id)
			default:
				_, err = tx.Exec(context.Background(), `INSERT INTO items (id, owner, v) VALUES ($1, $2, $3)
					ON CONFLICT (id) DO UPDATE SET v = excluded.v`, id, fmt.Sprintf("o%d", id%3), i*10+k)
			}
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(context.Background()))
	}
	// Every write materialized first: a group's lag is zero only against what is
	// materialized, so before that it could be zero with transactions still to come.
	var end string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&end))
	deadline := time.Now().Add(60 * time.Second)
	for {
		var done bool
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT coalesce(processed_end_lsn >= $1::pg_lsn, false) FROM synchro.progress`, end).Scan(&done))
		if done {
			break
		}
		require.False(t, time.Now().After(deadline), "the runner did not materialize the writes")
		time.Sleep(20 * time.Millisecond)
	}
	for _, g := range groups {
		waitLagZero(t, db, g.name, 1)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	order, ids := txnChanges(t, db)
	require.NotEmpty(t, order)
	for _, g := range groups {
		var got []string
		for _, x := range g.seen {
			got = append(got, x.Position)
			var gotIDs []string
			for _, c := range x.Changes {
				gotIDs = append(gotIDs, c.ChangeID)
			}
			require.Equal(t, ids[x.Position], gotIDs, "group %s, transaction %s", g.name, x.Position)
		}
		require.Equal(t, order, got, "group %s: every transaction once, in order", g.name)
	}
}

// helperConsumer is the killed process: it consumes group "victim" three
// transactions at a time, reports each batch on stdout, acknowledges the first and
// hangs in the handler of the second until it is killed.
func helperConsumer() int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("CONSUMER_TEST_HELPER_URL"))
	if err != nil {
		return 2
	}
	cfg.AfterConnect = setConsumerRole
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 2
	}
	n := 0
	err = consumer.Run(ctx, consumer.Config{DB: pool, Group: "victim", Owner: "victim-process", MaxTransactions: 3,
		LeaseDuration: 4 * time.Second, PollInterval: 20 * time.Millisecond}, // a renewal may be late by ~2.6 s (a loaded machine)
		func(ctx context.Context, b consumer.Batch) error {
			n++
			fmt.Println("BATCH", batchLine(b))
			if n == 2 {
				fmt.Println("HANG")
				select {} // killed here, mid-batch
			}
			return nil
		})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

func batchLine(b consumer.Batch) string {
	var parts []string
	for _, x := range b.Transactions {
		var ids []string
		for _, c := range x.Changes {
			ids = append(ids, c.ChangeID)
		}
		parts = append(parts, x.Position+"="+strings.Join(ids, ","))
	}
	return strings.Join(parts, " ")
}

// A consumer process killed (SIGKILL) in the middle of a batch: after its lease
// expires another owner gets exactly that batch again (same positions, same change
// ids), then the rest; nothing it acknowledged before comes again.
func TestKilledConsumerRedeliversItsBatch(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema+`SELECT synchro.create_consumer_group('victim');`)
	require.NoError(t, err)
	testrunner.Start(t, db)
	for i := range 9 {
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
		require.NoError(t, err)
	}
	waitTxns := func(n int) {
		require.Eventually(t, func() bool {
			order, _ := txnChanges(t, db)
			return len(order) == n
		}, 60*time.Second, 20*time.Millisecond)
	}
	waitTxns(9)
	order, _ := txnChanges(t, db)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CONSUMER_TEST_HELPER_URL="+db.URL)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	var batches []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "HANG" {
			break
		}
		if b, ok := strings.CutPrefix(line, "BATCH "); ok {
			batches = append(batches, b)
		}
	}
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	require.Len(t, batches, 2, "the helper handled one batch and hung in the second")

	pool := consumerPool(t, db.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- consumer.Run(ctx, consumer.Config{DB: pool, Group: "victim", Owner: "survivor", MaxTransactions: 3,
			LeaseDuration: 4 * time.Second, PollInterval: 20 * time.Millisecond}, // a renewal may be late by ~2.6 s (a loaded machine)
			func(ctx context.Context, b consumer.Batch) error {
				got = append(got, batchLine(b))
				if len(got) == 2 {
					cancel()
				}
				return nil
			})
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the survivor did not finish")
	}
	require.Len(t, got, 2)
	require.Equal(t, batches[1], got[0], "the killed batch, whole and with the same change ids")
	require.NotContains(t, got, batches[0], "nothing acknowledged before comes again")
	var tail []string
	for _, p := range strings.Fields(got[1]) {
		tail = append(tail, strings.SplitN(p, "=", 2)[0])
	}
	require.Equal(t, order[6:], tail)

	// The victim's takeover is visible: the survivor's lease, a higher token.
	var owner *string
	var last int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT lease_owner, last_token FROM synchro.consumer_groups WHERE name = 'victim'`).Scan(&owner, &last))
	require.Nil(t, owner, "the survivor released its lease on its clean stop")
	require.GreaterOrEqual(t, last, int64(2))
}

func setConsumerRole(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, `SET ROLE synchro_consumer`)
	return err
}

// groupState is the group's checkpoint, lag, lease owner and last token.
type groupState struct {
	checkpoint string
	lag        int64
	owner      *string
	lastToken  int64
}

func stateOf(t testing.TB, db *testdb.DB, group string) groupState {
	t.Helper()
	var s groupState
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT checkpoint, lag_transactions, lease_owner, last_token FROM synchro.consumer_groups WHERE name = $1`, group).
		Scan(&s.checkpoint, &s.lag, &s.owner, &s.lastToken))
	return s
}

// threeTxns writes three source transactions and waits until they carry changes.
func threeTxns(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	for i := range 3 {
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		order, _ := txnChanges(t, db)
		return len(order) == 3
	}, 60*time.Second, 20*time.Millisecond)
	order, _ := txnChanges(t, db)
	return order
}

// A handler that works for longer than the lease keeps it: Run renews the lease while
// the batch is in flight (the token moves on, another owner is refused with 55P03),
// nothing is acknowledged until the handler returns nil, and then the batch is.
func TestLeaseRenewedWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema+`SELECT synchro.create_consumer_group('long');`)
	require.NoError(t, err)
	testrunner.Start(t, db)
	order := threeTxns(t, db)
	pool := consumerPool(t, db.URL)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	entered := make(chan consumer.Batch, 1)
	finish := make(chan struct{})
	handlerCtxErr := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Run(ctx, consumer.Config{DB: pool, Group: "long", Owner: "worker", MaxTransactions: 10,
			LeaseDuration: 4 * time.Second, PollInterval: 20 * time.Millisecond}, // a renewal may be late by ~2.6 s (a loaded machine)
			func(hctx context.Context, b consumer.Batch) error {
				select {
				case entered <- b:
				default:
					return nil // later (empty-handed) batches: nothing to hold
				}
				<-finish
				handlerCtxErr <- hctx.Err()
				return nil
			})
	}()
	var b consumer.Batch
	select {
	case b = <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("no batch reached the handler")
	}
	require.Len(t, b.Transactions, 3)
	first := stateOf(t, db, "long")
	require.Equal(t, int64(3), first.lag, "nothing acknowledged while the handler runs")

	// Three renewals at LeaseDuration/3 each: the handler has held the batch for at
	// least one whole lease, and the lease is still this owner's.
	require.Eventually(t, func() bool {
		return stateOf(t, db, "long").lastToken >= first.lastToken+3
	}, 60*time.Second, 50*time.Millisecond, "the lease is renewed while the handler runs")
	other, err := pgx.Connect(context.Background(), db.URL)
	require.NoError(t, err)
	defer other.Close(context.Background())
	require.NoError(t, setConsumerRole(context.Background(), other))
	_, err = other.Exec(context.Background(), `SELECT synchro.acquire_lease('long', 'intruder', 60)`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "another owner cannot take a renewed lease")
	mid := stateOf(t, db, "long")
	require.Equal(t, first.checkpoint, mid.checkpoint, "still nothing acknowledged")
	require.Equal(t, "worker", *mid.owner)

	close(finish)
	require.NoError(t, <-handlerCtxErr, "the handler's context lived as long as the lease")
	require.Eventually(t, func() bool {
		return stateOf(t, db, "long").lag == 0
	}, 60*time.Second, 20*time.Millisecond, "the batch is acknowledged once the handler returned nil")
	require.Equal(t, order[2], stateOf(t, db, "long").checkpoint)
	cancel()
	require.NoError(t, <-done)
}

// A handler error leaves the batch unacknowledged: Run returns that error (wrapped),
// gives the lease back, and the next Run gets the same batch, same change ids.
func TestHandlerErrorLeavesBatchUnacknowledged(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema+`SELECT synchro.create_consumer_group('flaky');`)
	require.NoError(t, err)
	testrunner.Start(t, db)
	threeTxns(t, db)
	before := stateOf(t, db, "flaky")
	pool := consumerPool(t, db.URL)
	cfg := consumer.Config{DB: pool, Group: "flaky", Owner: "worker", MaxTransactions: 2,
		LeaseDuration: 5 * time.Second, PollInterval: 20 * time.Millisecond}

	down := errors.New("destination down")
	var failed consumer.Batch
	err = consumer.Run(context.Background(), cfg, func(_ context.Context, b consumer.Batch) error {
		failed = b
		return down
	})
	require.ErrorIs(t, err, down)
	require.Len(t, failed.Transactions, 2)
	after := stateOf(t, db, "flaky")
	require.Equal(t, before.checkpoint, after.checkpoint, "a failed batch is not acknowledged")
	require.Equal(t, int64(3), after.lag)
	require.Nil(t, after.owner, "the lease was given back")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var again consumer.Batch
	err = consumer.Run(ctx, cfg, func(_ context.Context, b consumer.Batch) error {
		again = b
		cancel()
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, batchLine(failed), batchLine(again), "the same batch again, same change ids")
	require.Equal(t, failed.Transactions[1].Position, stateOf(t, db, "flaky").checkpoint,
		"acknowledged once the handler returned nil, also while Run stops")
}

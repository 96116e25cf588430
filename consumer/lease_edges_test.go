package consumer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/consumer"
	"github.com/synchro/synchro/internal/testrunner"
	"github.com/synchro/synchro/tests/testdb"
)

// Independent review of the consumer library.

// Run "consumes the group until ctx ends (then it returns nil after giving the lease
// back)": a context that ends by its deadline ends it too. Run returned
// context.DeadlineExceeded (only context.Canceled was taken for a clean stop).
func TestConsumerDeadlineEndsRunCleanly(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema+`SELECT synchro.create_consumer_group('idle');`)
	require.NoError(t, err)
	testrunner.Start(t, db)
	pool := consumerPool(t, db.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = consumer.Run(ctx, consumer.Config{DB: pool, Group: "idle", Owner: "worker",
		LeaseDuration: 5 * time.Second, PollInterval: 20 * time.Millisecond},
		func(context.Context, consumer.Batch) error { return nil })
	require.NoError(t, err, "ctx ended: Run returns nil")
	require.Nil(t, stateOf(t, db, "idle").owner, "the lease was given back")
}

// A RenewEvery at or beyond the lease: the lease expires between two renewals, another
// owner takes over, and the handler's context lives on ("its context is cancelled when
// the lease is lost"), so two owners apply batches at once. Run must refuse such a
// configuration (or renew within the lease).
func TestConsumerRenewEveryBeyondLease(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), schema+`SELECT synchro.create_consumer_group('slow');`)
	require.NoError(t, err)
	testrunner.Start(t, db)
	threeTxns(t, db)
	pool := consumerPool(t, db.URL)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	entered := make(chan context.Context, 1)
	done := make(chan error, 1)
	go func() {
		done <- consumer.Run(ctx, consumer.Config{DB: pool, Group: "slow", Owner: "worker", MaxTransactions: 10,
			LeaseDuration: time.Second, RenewEvery: time.Hour, PollInterval: 20 * time.Millisecond},
			func(hctx context.Context, b consumer.Batch) error {
				select {
				case entered <- hctx:
				default:
				}
				<-hctx.Done()
				return hctx.Err()
			})
	}()
	var hctx context.Context
	select {
	case err := <-done:
		require.Error(t, err, "a refused configuration is fine")
		return
	case hctx = <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("no batch reached the handler")
	}
	other, err := pgx.Connect(context.Background(), db.URL)
	require.NoError(t, err)
	defer other.Close(context.Background())
	require.NoError(t, setConsumerRole(context.Background(), other))
	require.Eventually(t, func() bool {
		_, err := other.Exec(context.Background(), `SELECT synchro.acquire_lease('slow', 'intruder', 60)`)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the lease expired while the handler ran")
	select {
	case <-hctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("another owner holds the lease, and the handler's context still lives")
	}
	cancel()
	err = <-done
	require.False(t, errors.Is(err, consumer.ErrRebuildRequired))
}

package tests

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// Under a steady load the applier has a materialization batch open almost all the
// time. The recorded acknowledgement (runner_ack, progress.acknowledged_end_lsn) must
// still follow the slot while the load lasts, not only once the stream goes idle:
// readiness, the ack lag metric and startup reconciliation read it. Red when the
// acknowledgement is recorded only on a poll tick that finds no batch open (it then
// stays behind for as long as the load lasts).
func TestRunnerRecordsAckUnderSteadyLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.PollInterval = 100 * time.Millisecond // the default
	// Batches of a few source transactions: each recorded acknowledgement waits for
	// a batch to commit, and at the default bound (20,000 row events) eleven of them
	// took a minute on a loaded machine. The mechanism does not depend on the size.
	cfg.BatchEvents = 2000
	startRunner(t, cfg)
	waitStream(t, db)

	// Two writers commit 300-row transactions back to back: the runner stays behind.
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var next atomic.Int64
	next.Store(1000)
	var written atomic.Int64
	for range 2 {
		wg.Go(func() {
			for wctx.Err() == nil {
				lo := next.Add(300) - 300
				if _, err := db.Pool.Exec(wctx, `INSERT INTO items (id, owner) SELECT g, 'a' FROM generate_series($1::int8, $1 + 299) g`, lo); err == nil {
					written.Add(1)
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	behind := func() bool {
		var b bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() > processed_end_lsn + 65536 FROM synchro.progress`).Scan(&b))
		return b
	}
	eventually(t, 60*time.Second, "a backlog", behind)

	// While the load goes on, the recorded acknowledgement moves forward again and
	// again (each time to a position the slot confirmed), and never passes the slot.
	var seen []pglogrepl.LSN
	eventually(t, 2*time.Minute, "the recorded acknowledgement to advance ten times under load", func() bool {
		st, ok := runnerState(t, db)
		require.True(t, ok)
		slot := slotLSN(t, db)
		ack := lsnOf(t, st.Acked)
		require.LessOrEqual(t, ack, slot, "the recorded acknowledgement is never ahead of the slot")
		if len(seen) == 0 || ack > seen[len(seen)-1] {
			seen = append(seen, ack)
			t.Logf("recorded acknowledgement %s (slot %s, processed %s)", ack, slot, *st.Processed)
		}
		return len(seen) >= 11
	})
	require.True(t, behind(), "the load lasted: the runner is still behind (%d transactions written)", written.Load())
}

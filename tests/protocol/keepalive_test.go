package protocol

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
)

// logLines collects a runner's log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, substr) {
			n++
		}
	}
	return n
}

// A keepalive arrives between a transaction's BEGIN and its COMMIT. The walsender is
// held inside a large transaction B (the runner's receive buffer is full while the
// materialization of the transaction A before it waits on a lock), and asks for a
// reply once half its wal_sender_timeout passed without one; that keepalive reaches
// the runner between B's rows, with a WAL end at B's commit record (PostgreSQL decodes a
// transaction when it reads its commit record). The runner answers
// (the walsender does not time out) and never takes that WAL end as an idle boundary:
// durable progress never passes B before B is materialized, and A and B are
// materialized once each.
func TestKeepaliveInsideTransaction(t *testing.T) {
	db := setup(t)
	ctx := context.Background()
	logs := &logLines{}
	reg := prometheus.NewRegistry()
	r, err := runner.New(runner.Config{
		// The walsender wants a reply after 3.5 s of silence; the runner's unprompted
		// updates are 4 s apart: keepalives come in between.
		DatabaseURL:       withOptions(t, db.URL, "wal_sender_timeout=7s"),
		Slot:              slotName(db),
		Owner:             "keepalive",
		HeartbeatInterval: 250 * time.Millisecond,
		StandbyInterval:   4 * time.Second,
		ReceiveTimeout:    30 * time.Second,
		PollInterval:      20 * time.Millisecond,
		BackoffMax:        300 * time.Millisecond,
		BufferBytes:       64 << 10,
		// While A's call is in flight the applier stages what follows in memory up
		// to BatchBytes before it waits: a small bound keeps the buffer full. One
		// apply connection: with a second, B would go to it while A waits.
		BatchBytes:    64 << 10,
		ApplySessions: 1,
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:       runner.NewMetrics(reg),
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		stop()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Error("runner did not stop")
		}
		if t.Failed() {
			logs.mu.Lock()
			t.Log(strings.Join(logs.lines, "\n"))
			logs.mu.Unlock()
		}
	}()
	eventually(t, 3*time.Minute, "the stream to exist", func() bool {
		return count(t, db, `SELECT count(*) FROM synchro.progress`) == 1
	})
	gauge := func(name string) float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				if m.GetGauge() != nil {
					return m.GetGauge().GetValue()
				}
				return m.GetCounter().GetValue()
			}
		}
		return 0
	}

	// Durable progress, sampled in one snapshot with whether B is materialized.
	type sample struct {
		processed    pglogrepl.LSN
		materialized bool
	}
	var (
		smu     sync.Mutex
		samples []sample
		xidB    atomic.Int64
	)
	sctx, stopSampling := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() {
		for sctx.Err() == nil {
			var p string
			var m bool
			x := xidB.Load()
			err := db.Pool.QueryRow(sctx, `SELECT processed_end_lsn::text,
				EXISTS (SELECT 1 FROM synchro.txn WHERE xid % 4294967296 = $1) FROM synchro.progress`, x).Scan(&p, &m)
			if err == nil && x != 0 {
				l, _ := pglogrepl.ParseLSN(p)
				smu.Lock()
				samples = append(samples, sample{l, m})
				smu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.effect IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	xidA, _ := commit(t, db, `INSERT INTO items SELECT g, 'a', 'A' FROM generate_series(1, 10) g`)
	beforeB := currentLSN(t, db.Pool)
	// B's output (about 40 MB) is larger than the kernel can buffer between the two
	// ends (receive buffers autotune up to net.ipv4.tcp_rmem's maximum, 32 MB here, and
	// send buffers to tcp_wmem's, 4 MB): the walsender is certainly held inside it. With
	// 2.3 MB, a connection whose buffer had grown took all of B in, the walsender went
	// on past B's commit, and no keepalive came inside B (seen once under load).
	xb, beforeCommitB := commit(t, db, `INSERT INTO items SELECT g, 'b', repeat('k', 1500) FROM generate_series(11, 27010) g`)
	xidB.Store(xb)
	eventually(t, 3*time.Minute, "the runner to hold part of B", func() bool {
		received := pglogrepl.LSN(gauge("synchro_runner_received_lsn"))
		return received > beforeB && received < beforeCommitB
	})
	// Two replies of the runner seen by the walsender: more than wal_sender_timeout/2
	// passed between them, so the walsender, blocked inside B, queued a keepalive.
	var replies []string
	eventually(t, time.Minute, "two status updates from the runner", func() bool {
		var rt *string
		err := db.Pool.QueryRow(ctx, `SELECT r.reply_time::text FROM pg_stat_replication r JOIN pg_stat_activity a USING (pid)
			WHERE a.datname = current_database() AND a.application_name = 'synchro-runner-replication'`).Scan(&rt)
		if err == nil && rt != nil && (len(replies) == 0 || replies[len(replies)-1] != *rt) {
			replies = append(replies, *rt)
		}
		return len(replies) >= 3
	})
	require.Zero(t, count(t, db, `SELECT count(*) FROM synchro.txn WHERE xid % 4294967296 IN ($1, $2)`, xidA, xb))
	require.NoError(t, lock.Rollback(ctx))

	exactlyOnce(t, db, xidA, 10)
	exactlyOnce(t, db, xb, 27000)
	stopSampling()
	swg.Wait()

	var commitLSN string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT commit_lsn::text FROM synchro.txn WHERE xid % 4294967296 = $1`, xb).Scan(&commitLSN))
	clsn, err := pglogrepl.ParseLSN(commitLSN)
	require.NoError(t, err)
	smu.Lock()
	for _, s := range samples {
		require.False(t, !s.materialized && s.processed > clsn,
			"durable progress %s passed the unmaterialized transaction at %s", s.processed, clsn)
	}
	smu.Unlock()
	inside := logs.count("keepalive inside a source transaction")
	t.Logf("%d keepalives inside a transaction, %d progress samples; B: %s .. commit %s", inside, len(samples), beforeB, clsn)

	require.Positive(t, inside, "no keepalive arrived inside the transaction")
	// The held-back reader's updates stay 4 s apart (TestStatusUpdatesWhileHeldBack),
	// within the 7 s timeout, and the keepalives inside B are answered, never an
	// error: the session never ends.
	require.Zero(t, gauge("synchro_runner_reconnects_total"), "the walsender timed out or the session ended")
}

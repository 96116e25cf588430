package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/runner"
)

// gauge reads a gauge of the runner's metrics; ok false when the series is absent.
func (r *runningRunner) gaugeOK(t *testing.T, name string) (float64, bool) {
	t.Helper()
	mfs, err := r.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

type livez struct {
	Live  bool     `json:"live"`
	Stuck []string `json:"stuck"`
}

func getLivez(t *testing.T, base string) (int, livez) {
	t.Helper()
	resp, err := http.Get(base + "/livez")
	require.NoError(t, err)
	defer resp.Body.Close()
	var b livez
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	return resp.StatusCode, b
}

// /livez: a materialization blocked by a lock held in another transaction makes the
// applier stuck once the liveness bound passes (503 naming it); released, it is live
// again and the write lands.
func TestLivezStuckApplier(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.LivenessTimeout = 2 * time.Second
	rr := startRunner(t, cfg)
	srv := httptest.NewServer(runner.Handler(rr.metrics, nil, rr.runner.Live))
	defer srv.Close()
	waitStream(t, db)
	waitAcked(t, db)
	code, body := getLivez(t, srv.URL)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, livez{Live: true, Stuck: []string{}}, body)

	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// Materialization records every source transaction in synchro.txn; the heartbeat
	// and readiness never write it.
	_, err = tx.Exec(ctx, `LOCK TABLE synchro.txn IN SHARE MODE`)
	require.NoError(t, err)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	eventually(t, 30*time.Second, "/livez 503", func() bool {
		code, body = getLivez(t, srv.URL)
		return code == http.StatusServiceUnavailable
	})
	require.Equal(t, livez{Live: false, Stuck: []string{"applier"}}, body)

	require.NoError(t, tx.Rollback(ctx))
	eventually(t, 30*time.Second, "/livez 200", func() bool {
		code, _ = getLivez(t, srv.URL)
		return code == http.StatusOK
	})
	got := waitEffects(t, db, 1)
	require.Equal(t, "5", got[0].PK)
	require.NoError(t, rr.stop(t))
}

// A long materialization that works is not stuck: while one large source transaction
// is materialized (one call, longer than the applier's own progress marks), /livez
// never names the applier.
func TestLivezLongMaterializationIsLive(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.LivenessTimeout = 2 * time.Second
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'o' || (g % 50), repeat('z', 100) FROM generate_series(10, 20009) g`)
	deadline := time.Now().Add(120 * time.Second)
	for {
		if ok, stuck := rr.runner.Live(); !ok {
			require.NotContains(t, stuck, "applier", "a working materialization is progress")
		}
		if countOf(t, db, `SELECT count(*) FROM synchro.effect`) >= 20000 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the large transaction was not materialized in time")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("liveness kept by the working backend %d times", len(logs.lines("materialization still working")))
	require.NoError(t, rr.stop(t))
}

// The query that keeps a long materialization live: a backend working on a statement
// is working, one waiting for a heavyweight lock or idle is not.
func TestBackendWorking(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	ctx := context.Background()
	q := gen.New(db.Pool)
	sleeper, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer sleeper.Release()
	var sleepPID int32
	require.NoError(t, sleeper.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&sleepPID))
	working, err := q.BackendWorking(ctx, sleepPID)
	require.NoError(t, err)
	require.False(t, working, "an idle backend does not work")
	done := make(chan error, 1)
	go func() { _, err := sleeper.Exec(ctx, `SELECT pg_sleep(2)`); done <- err }()
	eventually(t, 5*time.Second, "the sleeping backend to work", func() bool {
		w, err := q.BackendWorking(ctx, sleepPID)
		require.NoError(t, err)
		return w
	})
	require.NoError(t, <-done)

	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `LOCK TABLE items IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	waiter, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer waiter.Release()
	var waitPID int32
	require.NoError(t, waiter.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&waitPID))
	blocked := make(chan error, 1)
	go func() { _, err := waiter.Exec(ctx, `SELECT count(*) FROM items`); blocked <- err }()
	eventually(t, 5*time.Second, "the waiter to wait for the lock", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, waitPID) == 1
	})
	working, err = q.BackendWorking(ctx, waitPID)
	require.NoError(t, err)
	require.False(t, working, "a backend waiting for a lock is not working")
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-blocked)
}

// /metrics: every database-side series is there and moves when it should.
func TestRunnerMetricsGauges(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.MetricsInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)

	eventually(t, 20*time.Second, "ready in the gauges", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_ready")
		return v == 1
	})
	finite := func(name string) float64 {
		v, ok := rr.gaugeOK(t, name)
		require.True(t, ok, name)
		require.False(t, math.IsNaN(v), name)
		return v
	}
	require.GreaterOrEqual(t, finite("synchro_wal_lag_bytes"), 0.0)
	require.GreaterOrEqual(t, finite("synchro_commit_lag_seconds"), 0.0)
	require.GreaterOrEqual(t, finite("synchro_heartbeat_age_seconds"), 0.0)
	require.Greater(t, finite("synchro_slot_retained_wal_bytes"), 0.0)
	require.Equal(t, -1.0, finite("synchro_slot_max_wal_keep_bytes"), "the test cluster keeps slot WAL without limit")
	require.Equal(t, -1.0, finite("synchro_slot_safe_wal_bytes"), "no limit: no WAL is ever unsafe")
	require.Equal(t, 0.0, finite("synchro_poisoned"))
	require.Equal(t, 0.0, rr.counter(t, "synchro_runner_reconnects_total"))
	n0, _ := rr.histogram(t, "synchro_materialization_latency_seconds")

	// Each materialized source transaction is one latency sample.
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)
	waitEffects(t, db, 2)
	eventually(t, 5*time.Second, "two latency samples", func() bool {
		n, _ := rr.histogram(t, "synchro_materialization_latency_seconds")
		return n == n0+2
	})

	// The slot retains more WAL while an open transaction holds its restart point back.
	mustExec(t, db, `CREATE TABLE scratch (x int)`)
	ctx := context.Background()
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `INSERT INTO scratch VALUES (1)`)
	require.NoError(t, err)
	retained := finite("synchro_slot_retained_wal_bytes")
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'b', repeat('x', 200) FROM generate_series(100, 2100) g`)
	eventually(t, 10*time.Second, "retained WAL to grow", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_slot_retained_wal_bytes")
		return v > retained+100000
	})
	require.NoError(t, held.Rollback(ctx))

	// A dropped session is a reconnect.
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-replication') x`))
	eventually(t, 10*time.Second, "a reconnect", func() bool {
		return rr.counter(t, "synchro_runner_reconnects_total") >= 1
	})

	// A poison: the gauge goes to 1, readiness and with it synchro_ready to 0.
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE items; COMMIT;`)
	eventually(t, 10*time.Second, "the poison gauge", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_poisoned")
		return v == 1
	})
	eventually(t, 5*time.Second, "not ready in the gauges", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_ready")
		return v == 0
	})
	// Blocked, the lags grow: WAL written after the processed boundary, and the
	// commit lag with the wall clock from the last WAL mark the boundary passed.
	walLag, commitLag := finite("synchro_wal_lag_bytes"), finite("synchro_commit_lag_seconds")
	mustExec(t, db, `INSERT INTO items (id, owner, note) SELECT g, 'c', repeat('y', 200) FROM generate_series(5000, 7000) g`)
	eventually(t, 10*time.Second, "the WAL lag to grow", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_wal_lag_bytes")
		return v > walLag+100000
	})
	eventually(t, 10*time.Second, "the commit lag to grow", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_commit_lag_seconds")
		return v > commitLag
	})
	// The heartbeat age is read anew at every refresh.
	age := finite("synchro_heartbeat_age_seconds")
	eventually(t, 10*time.Second, "another heartbeat age", func() bool {
		v, _ := rr.gaugeOK(t, "synchro_heartbeat_age_seconds")
		return v != age
	})
}

// syncLog collects log output from several goroutines.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *syncLog) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// fatalRunner starts a runner whose logs the test reads and waits for it to stop with
// a fatal error.
func fatalRunner(t *testing.T, cfg runner.Config) (error, *syncLog) {
	t.Helper()
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	// The captured log is the only record of what the runner did instead.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runner's log:\n%s", logs.String())
		}
	})
	err := rr.wait(t, 30*time.Second)
	require.Error(t, err)
	return err, logs
}

// A slot with another output plugin under the stream's name is a fatal state: the
// runner stops with one log line naming it, and readiness's slot check says why.
func TestRunnerFatalForeignPluginSlot(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		rr := startRunner(t, cfg)
		waitStream(t, db)
		waitAcked(t, db)
		require.NoError(t, rr.stop(t))
		// The walsender exits after the runner's connection closes, not with it.
		eventually(t, 30*time.Second, "the stopped runner's walsender to release the slot", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, runnerSlot(db)) == 0
		})
		mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, runnerSlot(db))
		mustExec(t, db, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, runnerSlot(db))

		err, logs := fatalRunner(t, cfg)
		require.ErrorContains(t, err, `output plugin "test_decoding"`)
		fatal := logs.lines("fatal state")
		require.Len(t, fatal, 1, "one log line names the fatal state")
		require.Contains(t, fatal[0], "test_decoding")
		require.Empty(t, logs.lines("retrying"), "a fatal state is not retried")
		rows, _ := readinessOf(t, db)
		slot := checkRow(rows, "slot")
		require.False(t, slot.OK)
		require.Contains(t, slot.Detail, "plugin_matches=false")
	})
}

// A dropped publication is a fatal state: the walsender refuses to decode, the next
// session's startup check finds the publication gone, the runner stops with one log
// line naming it, and readiness's publication check says why.
func TestRunnerFatalMissingPublication(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	mustExec(t, db, `DROP PUBLICATION synchro`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	err := rr.wait(t, 30*time.Second)
	require.ErrorContains(t, err, `publication "synchro" does not exist`)
	fatal := logs.lines("fatal state")
	require.Len(t, fatal, 1, "one log line names the fatal state")
	require.Contains(t, fatal[0], "publication")
	rows, _ := readinessOf(t, db)
	pub := checkRow(rows, "publication")
	require.False(t, pub.OK)
	require.Equal(t, "publication missing", pub.Detail)
}

// A publication dropped and created again is still a fatal state (found while writing
// the runbook: the runner used to retry it for ever). The walsender decodes with the
// catalog as of the slot's position, where the new publication does not exist yet, so
// it answers undefined_object for the writes made while it was gone, on every session:
// only a stream reset recovers.
func TestRunnerFatalRecreatedPublication(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	mustExec(t, db, `DROP PUBLICATION synchro`)
	// A write while the publication is gone: decoding it needs the publication.
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	mustExec(t, db, `CREATE PUBLICATION synchro WITH (publish = 'insert, update, delete, truncate')`)
	mustExec(t, db, `ALTER PUBLICATION synchro ADD TABLE items`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)

	if countOf(t, db, `SELECT current_setting('server_version_num')::int`) >= 180000 {
		// PostgreSQL 18's pgoutput skips a publication missing at the decoding
		// snapshot instead of failing: the write made while it was gone arrives
		// as its fence message without its row change. Fence reconciliation
		// catches exactly that, so the stream still stops, as a blocking
		// fence_mismatch poison that only a stream reset clears.
		rr := startRunner(t, cfg)
		var q []quarantineRow
		eventually(t, 20*time.Second, "a quarantine record", func() bool {
			q = quarantines(t, db)
			return len(q) > 0
		})
		require.Len(t, q, 1)
		require.Equal(t, "fence_mismatch", q[0].Class)
		requireBlockedAt(t, db, q[0])
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk IN ('5', '6')`),
			"nothing after the missing publication's gap is pull-visible")
		require.NoError(t, rr.stop(t))
		return
	}
	err, logs := fatalRunner(t, cfg)
	require.ErrorContains(t, err, "the stream must be reset")
	require.Len(t, logs.lines("fatal state"), 1, "one log line names the fatal state")
	require.Empty(t, logs.lines("retrying"), "a fatal state is not retried")
}

// tcpProxy forwards connections to PostgreSQL until drop, which closes every
// connection and the listener (a network drop: new connections are refused), and
// resume, which listens on the same address again.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	p.listen("127.0.0.1:0")
	t.Cleanup(p.drop)
	return p
}

func (p *tcpProxy) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
}

func (p *tcpProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *tcpProxy) resume() { p.listen(p.addr) }

// Every reconnect re-runs startup reconciliation: a slot replaced by one of another
// output plugin while the network to PostgreSQL was down (every session of the runner
// cut and new connections refused, through a proxy) is found when the runner gets
// through again, and is a fatal state with one log line naming it, not a retry loop.
func TestRunnerReconnectReconciles(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	cfg := testRunnerConfig(t, db)
	cfg.DatabaseURL = u.String()
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the runner's log:\n%s", logs.String())
		}
	})
	waitStream(t, db)
	waitAcked(t, db)

	proxy.drop()
	eventually(t, 30*time.Second, "the cut walsender to release the slot", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, runnerSlot(db)) == 0
	})
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, runnerSlot(db))
	mustExec(t, db, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, runnerSlot(db))
	eventually(t, 30*time.Second, "a refused reconnect, retried", func() bool {
		return len(logs.lines("retrying")) > 0
	})
	require.Empty(t, logs.lines("fatal state"))
	proxy.resume()

	err = rr.wait(t, 60*time.Second)
	require.ErrorContains(t, err, `output plugin "test_decoding"`)
	fatal := logs.lines("fatal state")
	require.Len(t, fatal, 1, "one log line names the fatal state")
	require.Contains(t, fatal[0], "test_decoding")
	rows, _ := readinessOf(t, db)
	require.Contains(t, checkRow(rows, "slot").Detail, "plugin_matches=false")
}

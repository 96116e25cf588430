package tests

// From an independent review of the runner's observability and operator surface
// (2026-12-04): readiness (synchro.readiness(), docs/sql/readiness.md), /livez,
// /readyz, /metrics and logs. Each test names the rule it checks. Two found bugs,
// fixed since (their comments say "Was a bug"); the others are scenarios found sound
// and kept as regressions.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// within polls cond every 20ms for at most d (no 60 s floor: a test that is red
// on purpose should not wait a minute to say so).
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reviewGauge reads a gauge of the runner's metrics (NaN when the series is absent).
func reviewGauge(t *testing.T, rr *runningRunner, name string) float64 {
	t.Helper()
	v, ok := rr.gaugeOK(t, name)
	if !ok {
		return math.NaN()
	}
	return v
}

// metricsText is the runner's /metrics exposition.
func metricsText(t *testing.T, rr *runningRunner) string {
	t.Helper()
	srv := httptest.NewServer(runner.Handler(rr.metrics, nil, rr.runner.Live))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// ---------------------------------------------------------------------------
// Slot WAL budget: synchro_slot_safe_wal_bytes and readiness's safe_wal_bytes.
// ---------------------------------------------------------------------------

// Slot WAL budget under a real max_slot_wal_keep_size (1 MB), with the runner holding a
// received transaction it cannot materialize, so the slot stays behind while WAL grows.
//
//   - unreserved_gauge (sound): at wal_status `unreserved` PostgreSQL 15 reports
//     safe_wal_size 0; readiness's slot row fails, and synchro_slot_safe_wal_bytes
//     follows it to 0 (not NaN, not -1).
//   - lost_detail (was a bug, fixed): once the slot is lost, safe_wal_size is NULL, and
//     readiness's slot detail reads NULL as `safe_wal_bytes=unlimited`
//     (`coalesce(slot.safe_bytes::text, 'unlimited')` in sql/functions/_readiness.sql)
//     next to `max_slot_wal_keep_bytes=1048576`. docs/sql/readiness.md defines the figure
//     as "WAL that may still be written before the slot starts losing WAL", "unlimited"
//     only for an unbounded server; a detail must carry "the figures that decided the
//     row". For a lost slot it states the opposite of the truth. The same NULL becomes
//     -1 ("max_slot_wal_keep_size is unlimited", docs/configuration.md) in the
//     SlotRetention query behind synchro_slot_safe_wal_bytes
//     (coalesce(s.safe_wal_size, -1)). Fixed: a lost slot reads `safe_wal_bytes=0` and
//     gauge 0; `unlimited` and -1 only when max_slot_wal_keep_size = -1.
//
// Not parallel: max_slot_wal_keep_size is server-wide (the sequential phase runs alone).
func TestObserveEdgeSlotBudget(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("max_slot_wal_keep_size is server-wide: needs the private cluster")
	}
	ctx := context.Background()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.MetricsInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	mustExec(t, db, `CREATE TABLE scratch (x int, pad text)`)

	// The runner receives a transaction and cannot materialize it: the slot (and its
	// restart_lsn) stays behind it while WAL grows.
	held, release := holdMaterialization(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	held()

	mustExec(t, db, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = db.Pool.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	mustExec(t, db, `SELECT pg_reload_conf()`)
	slot := runnerSlot(db)
	walStatus := func() string {
		return textOf(t, db, `SELECT coalesce((SELECT coalesce(wal_status, 'null') FROM pg_replication_slots WHERE slot_name = $1), 'missing')`, slot)
	}
	// New segments without a checkpoint: the slot's segment is no longer reserved
	// but not removed yet.
	status := ""
	eventually(t, 60*time.Second, "wal_status unreserved", func() bool {
		mustExec(t, db, `INSERT INTO scratch SELECT g, repeat('x', 100) FROM generate_series(1, 200) g`)
		mustExec(t, db, `SELECT pg_switch_wal()`)
		status = walStatus()
		return status == "unreserved" || status == "lost"
	})

	t.Run("unreserved_gauge", func(t *testing.T) {
		if status != "unreserved" {
			t.Skip("an automatic checkpoint lost the slot before unreserved was seen")
		}
		var safe int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT safe_wal_size FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&safe))
		t.Logf("pg_replication_slots.safe_wal_size = %d (wal_status unreserved)", safe)
		require.LessOrEqual(t, safe, int64(0), "PostgreSQL reports the exceeded budget as safe_wal_size <= 0")
		rows, _ := readinessOf(t, db)
		require.False(t, checkRow(rows, "slot").OK, "an unreserved slot is not ready:\n%s", readinessString(rows))
		require.Contains(t, checkRow(rows, "slot").Detail, "wal_status=unreserved")
		// Wait for a refresh after the switches: the gauge reaches the WAL the slot
		// retains now (it only grows while the slot is held back).
		var retained int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - restart_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&retained))
		require.True(t, within(15*time.Second, func() bool {
			return reviewGauge(t, rr, "synchro_slot_retained_wal_bytes") >= float64(retained)
		}), "the retained-WAL gauge did not refresh: %v, retained %d", reviewGauge(t, rr, "synchro_slot_retained_wal_bytes"), retained)
		t.Logf("gauges while unreserved: retained=%v max_keep=%v safe=%v",
			reviewGauge(t, rr, "synchro_slot_retained_wal_bytes"), reviewGauge(t, rr, "synchro_slot_max_wal_keep_bytes"),
			reviewGauge(t, rr, "synchro_slot_safe_wal_bytes"))
		require.True(t, within(5*time.Second, func() bool {
			v := reviewGauge(t, rr, "synchro_slot_safe_wal_bytes")
			return !math.IsNaN(v) && v <= 0 && v != -1
		}), "synchro_slot_safe_wal_bytes = %v while the slot exists with safe_wal_size %d (wal_status unreserved): "+
			"the gauge must be at or below 0 (NaN is documented as 'without the slot', -1 as 'unlimited')",
			reviewGauge(t, rr, "synchro_slot_safe_wal_bytes"), safe)
	})

	t.Run("lost_detail", func(t *testing.T) {
		eventually(t, 60*time.Second, "wal_status lost", func() bool {
			mustExec(t, db, `INSERT INTO scratch SELECT g, repeat('x', 100) FROM generate_series(1, 200) g`)
			mustExec(t, db, `SELECT pg_switch_wal()`)
			mustExec(t, db, `CHECKPOINT`)
			return walStatus() == "lost"
		})
		rows, ready := readinessOf(t, db)
		require.False(t, ready)
		d := checkRow(rows, "slot").Detail
		t.Logf("slot detail of a lost slot: %s", d)
		require.Contains(t, d, "wal_status=lost")
		require.Contains(t, d, "max_slot_wal_keep_bytes=1048576")
		require.NotContains(t, d, "safe_wal_bytes=unlimited",
			"a lost slot under a 1 MiB max_slot_wal_keep_size has no unlimited safe WAL")
		require.Contains(t, d, "safe_wal_bytes=0", "a lost slot has nothing left")
	})
	release()
}

// ---------------------------------------------------------------------------
// synchro_ready when readiness cannot be read.
// ---------------------------------------------------------------------------

// Was a bug (fixed): when a refresh of the database-side gauges failed (readiness cannot be read:
// here its query waits on a lock until the refresh budget ends), synchro_ready becomes
// NaN, while /readyz answers 503 (not ready) for the same condition.
//
// Rules: ADR 001 "Readiness is fail-closed ... unavailable readiness data is unready";
// the metric's own Help (runner/metrics.go) "1 when every check of synchro.readiness()
// was ok at the last refresh, else 0"; docs/runbook.md "What to watch": synchro_ready is
// "the same answer" as /readyz, "for alerting". A Prometheus alert on
// `synchro_ready == 0` (or `< 1`) never fires on NaN, so the one alert meant to catch
// "not ready" stays silent exactly while readiness is unavailable.
//
// Cause: Metrics.observed sets readyState to g.ready, which observe leaves NaN on any
// error (readinessGauges is never reached). Fix: set synchro_ready to 0 whenever the
// refresh could not establish readiness (NaN is fine for the figures, not for the
// verdict).
func TestObserveEdgeReadyGaugeFailClosed(t *testing.T) {
	t.Parallel()
	db, rr := readyMetricsRunner(t)
	require.True(t, within(20*time.Second, func() bool { return reviewGauge(t, rr, "synchro_ready") == 1 }))
	errs0 := rr.counter(t, "synchro_metrics_refresh_errors_total")

	// Readiness cannot be read: its limits row is locked (nothing of the runner's own
	// work touches that table, the stream keeps going).
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE synchro.readiness_limit IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	// /readyz: not ready (its query times out: fail closed).
	rd, err := runner.NewReadiness(db.URL)
	require.NoError(t, err)
	defer rd.Close()
	srv := httptest.NewServer(runner.Handler(rr.metrics, rd.Ready, rr.runner.Live))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s", body)
	t.Logf("/readyz while readiness is unavailable: %d %s", resp.StatusCode, body)

	require.True(t, within(30*time.Second, func() bool {
		return rr.counter(t, "synchro_metrics_refresh_errors_total") > errs0
	}), "the refresh did not fail")
	v := reviewGauge(t, rr, "synchro_ready")
	require.Equal(t, 0.0, v, "synchro_ready after a failed refresh (readiness unavailable) must be 0, not %v", v)
}

// ---------------------------------------------------------------------------
// A stuck runner looks lagging; an idle one does not.
// ---------------------------------------------------------------------------

// Sound: a runner whose materialization is blocked (a lock held by another
// transaction) keeps its heartbeat and its `streaming` state, yet readiness fails on
// commit_lag once the limit passes, and the lag gauge grows (ADR 001 "Readiness":
// heartbeat, WAL lag and commit lag bound the work in progress; LESSONS.md PowerSync
// #700: readiness must measure progress, not liveness).
func TestObserveEdgeStuckRunnerLags(t *testing.T) {
	t.Parallel()
	db, rr := readyMetricsRunner(t)
	mustExec(t, db, `UPDATE synchro.readiness_limit SET commit_lag = interval '2 seconds'`)
	waitReady(t, db)

	held, release := holdMaterialization(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	held()
	rows := waitFailing(t, db, "commit_lag")
	// Only the lag says it: the runner runs and beats.
	requireFailing(t, rows, "commit_lag")
	require.Contains(t, checkRow(rows, "worker").Detail, "state=streaming")
	require.True(t, within(10*time.Second, func() bool {
		return reviewGauge(t, rr, "synchro_commit_lag_seconds") > 2 && reviewGauge(t, rr, "synchro_ready") == 0
	}), "commit lag gauge %v, ready gauge %v", reviewGauge(t, rr, "synchro_commit_lag_seconds"), reviewGauge(t, rr, "synchro_ready"))

	release()
	waitEffects(t, db, 1)
	waitReady(t, db)
	require.True(t, within(10*time.Second, func() bool {
		v := reviewGauge(t, rr, "synchro_commit_lag_seconds")
		return v >= 0 && v < 2 && reviewGauge(t, rr, "synchro_ready") == 1
	}), "after catching up the lag gauge must fall back: %v", reviewGauge(t, rr, "synchro_commit_lag_seconds"))
}

// Sound: with the production intervals (heartbeat 5 s, standby 10 s, idle 1 s), an idle
// database stays ready under a 15 s commit-lag limit (docs/sql/readiness.md "Commit
// lag": a caught-up runner shows at most about 11 s with the defaults), and the lag
// gauges are never negative.
func TestObserveEdgeIdleNotLagging(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.HeartbeatInterval = 0 // defaults
	cfg.StandbyInterval = 0
	cfg.ReceiveTimeout = 0
	cfg.IdleInterval = 0
	cfg.MetricsInterval = 500 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitReady(t, db)
	mustExec(t, db, `UPDATE synchro.readiness_limit SET commit_lag = interval '15 seconds'`)
	waitReady(t, db)
	// Three standby intervals; -short (CI) two.
	watch := 30 * time.Second
	if testing.Short() {
		watch = 20 * time.Second
	}
	deadline := time.Now().Add(watch)
	maxLag := 0.0
	for time.Now().Before(deadline) {
		rows, ready := readinessOf(t, db)
		require.True(t, ready, "an idle, caught-up database must stay ready:\n%s", readinessString(rows))
		for _, g := range []string{"synchro_commit_lag_seconds", "synchro_wal_lag_bytes", "synchro_heartbeat_age_seconds"} {
			v := reviewGauge(t, rr, g)
			require.False(t, v < 0, "%s = %v", g, v)
		}
		if v := reviewGauge(t, rr, "synchro_commit_lag_seconds"); v > maxLag {
			maxLag = v
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("largest idle commit lag gauge: %.3f s", maxLag)
}

// ---------------------------------------------------------------------------
// A replication connection that goes silent (network black hole).
// ---------------------------------------------------------------------------

// holeProxy forwards TCP to PostgreSQL; while holed, the replication connections
// (recognized by their application_name in the startup packet) pass nothing in
// either direction, FIN included: a black hole on that path only, while the
// runner's control, apply and metrics sessions keep working.
type holeProxy struct {
	target string
	addr   string
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	holed  bool
	conns  []net.Conn
}

type holePair struct {
	repl atomic.Bool
	head []byte // first client bytes (client-to-server goroutine only)
}

func newHoleProxy(t *testing.T, target string) *holeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holeProxy{target: target, addr: ln.Addr().String(), ln: ln}
	p.cond = sync.NewCond(&p.mu)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			pr := &holePair{}
			go p.pipe(c, up, pr, true)
			go p.pipe(up, c, pr, false)
		}
	}()
	t.Cleanup(func() {
		p.setHoled(false)
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
	return p
}

func (p *holeProxy) setHoled(h bool) {
	p.mu.Lock()
	p.holed = h
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *holeProxy) wait(pr *holePair) {
	p.mu.Lock()
	for p.holed && pr.repl.Load() {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

func (p *holeProxy) pipe(src, dst net.Conn, pr *holePair, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient && len(pr.head) < 2048 {
				pr.head = append(pr.head, buf[:n]...)
				if bytes.Contains(pr.head, []byte("synchro-runner-replication")) {
					pr.repl.Store(true)
				}
			}
			p.wait(pr)
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				_ = dst.Close()
				return
			}
		}
		if err != nil {
			p.wait(pr)
			_ = dst.Close()
			_ = src.Close()
			return
		}
	}
}

// Sound: the replication connection goes silent (nothing passes, not even a FIN) while
// the control session keeps the heartbeat fresh. The runner detects the dead
// connection by its receive timeout (LESSONS.md: PowerSync #700, half-open
// connection) and readiness turns not ready (worker: state backoff) instead of
// reporting a healthy stream; the write made meanwhile is not pull-visible. When the
// path comes back the runner streams again, ready, and the write arrives.
func TestObserveEdgeReplicationBlackHole(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	p := newHoleProxy(t, u.Host)
	u.Host = p.addr
	cfg := testRunnerConfig(t, db)
	cfg.DatabaseURL = u.String()
	cfg.StandbyInterval = 500 * time.Millisecond
	cfg.ReceiveTimeout = 2 * time.Second
	cfg.MetricsInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitReady(t, db)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'synchro-runner-replication'`))

	p.setHoled(true)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	start := time.Now()
	var rows []readinessRow
	require.True(t, within(20*time.Second, func() bool {
		var ready bool
		rows, ready = readinessOf(t, db)
		return !ready
	}), "readiness stayed ready with a silent replication connection:\n%s", readinessString(rows))
	t.Logf("not ready %.1fs after the black hole:\n%s", time.Since(start).Seconds(), readinessString(rows))
	require.True(t, checkRow(rows, "heartbeat").OK, "the control session still beats")
	// Stays not ready while the path is dead (the old walsender holds the slot until
	// wal_sender_timeout; new replication connections are black-holed too).
	for range 10 {
		rows, ready := readinessOf(t, db)
		require.False(t, ready, "ready again while the replication path is dead:\n%s", readinessString(rows))
		time.Sleep(200 * time.Millisecond)
	}
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '3'`))
	require.True(t, within(5*time.Second, func() bool { return reviewGauge(t, rr, "synchro_ready") == 0 }))
	live, stuck := rr.runner.Live()
	t.Logf("/livez while the replication path is dead: live=%v stuck=%v", live, stuck)

	p.setHoled(false)
	waitEffects(t, db, 1)
	waitReady(t, db)
}

// ---------------------------------------------------------------------------
// No row values or keys in logs, metrics, quarantine records or readiness.
// ---------------------------------------------------------------------------

// Sound: a string key, scope value and column values that are secrets travel through
// materialization and then through a poison (a write that bypassed the fence: the
// quarantine names a relation and a class). None of them reaches the runner's log
// (debug level), /metrics, synchro.poison, synchro.readiness() or a push rejection's
// reason (CONTRACT.md: messages never carry row values; ADR 001: the quarantine record
// is redacted, "bounded failure class"; runner/metrics.go: labels bounded).
func TestObserveEdgeNoValuesInSignals(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const secret = "zq7SECRETv4lue"
	mustExec(t, db, `
		CREATE TABLE vault (k text PRIMARY KEY, owner text, note text, CONSTRAINT vault_note_key UNIQUE (note));
		SELECT synchro.register_table('vault', 'vault');
		SELECT synchro.add_scope_rule('vault', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		GRANT SELECT, INSERT, UPDATE, DELETE ON vault TO synchro_app;`)
	cfg := testRunnerConfig(t, db)
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.MetricsInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
	waitStream(t, db)
	waitAcked(t, db)

	mustExec(t, db, `INSERT INTO vault VALUES ('k-`+secret+`', 'o-`+secret+`', 'n-`+secret+`')`)
	waitEffects(t, db, 1)

	// A push that violates the unique constraint with the secret: rejected, reason
	// without the value.
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL ROLE synchro_app`)
	require.NoError(t, err)
	var pushed string
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.push('c1', jsonb_build_array(jsonb_build_object(
		'id', gen_random_uuid(), 'table', 'vault', 'op', 'insert', 'pk', 'k2-`+secret+`',
		'row', jsonb_build_object('owner', 'o2', 'note', 'n-`+secret+`'))))::text`).Scan(&pushed))
	require.NoError(t, tx.Commit(ctx))
	require.Contains(t, pushed, `"rejected"`)
	require.Contains(t, pushed, `23505`)
	require.NotContains(t, pushed, secret, "push rejection reason: %s", pushed)

	// A poison carrying the secret: the fence bypassed.
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica;
		INSERT INTO vault VALUES ('p-`+secret+`', 'po-`+secret+`', 'pn-`+secret+`'); COMMIT;`)
	eventually(t, 10*time.Second, "the poison quarantined", func() bool { return len(quarantines(t, db)) == 1 })
	require.True(t, within(10*time.Second, func() bool { return reviewGauge(t, rr, "synchro_poisoned") == 1 }))

	rows, ready := readinessOf(t, db)
	require.False(t, ready)
	for _, r := range rows {
		require.NotContains(t, r.Detail, secret, r.Name)
	}
	poison := textOf(t, db, `SELECT coalesce(string_agg(row_to_json(p)::text, ','), '') FROM synchro.poison p`)
	t.Logf("synchro.poison: %s", poison)
	require.NotEmpty(t, poison)
	require.NotContains(t, poison, secret)
	q := textOf(t, db, `SELECT coalesce(string_agg(row_to_json(q)::text, ','), '') FROM synchro.quarantine q`)
	require.NotContains(t, q, secret)
	m := metricsText(t, rr)
	require.NotContains(t, m, secret, "/metrics")
	require.Contains(t, m, `synchro_runner_poison_total{class="fence_mismatch"} 1`)
	require.NotContains(t, logs.String(), secret, "runner log")
	// Label values of every series are bounded identifiers.
	label := regexp.MustCompile(`\{([^}]*)\}`)
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if mm := label.FindStringSubmatch(line); mm != nil {
			require.Less(t, len(mm[1]), 200, line)
		}
	}
}

// ---------------------------------------------------------------------------
// Triggers: every way of turning a fence off fails the triggers check.
// ---------------------------------------------------------------------------

// Sound: ENABLE REPLICA TRIGGER (fires only under session_replication_role = replica),
// DISABLE TRIGGER ALL and DISABLE TRIGGER USER all fail readiness's triggers row
// (ADR 001: readiness proves the required triggers are installed and enabled). SQL
// only: the triggers row needs no runner.
func TestObserveEdgeTriggerModes(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	for _, tc := range []struct{ off, on, reason string }{
		{`ALTER TABLE items ENABLE REPLICA TRIGGER synchro_fence_insert`, `ALTER TABLE items ENABLE TRIGGER synchro_fence_insert`,
			"synchro_fence_insert disabled"},
		{`ALTER TABLE items DISABLE TRIGGER ALL`, `ALTER TABLE items ENABLE TRIGGER ALL`, "disabled"},
		{`ALTER TABLE items DISABLE TRIGGER USER`, `ALTER TABLE items ENABLE TRIGGER USER`, "disabled"},
	} {
		rows, _ := readinessOf(t, db)
		require.True(t, checkRow(rows, "triggers").OK, "%s", readinessString(rows))
		mustExec(t, db, tc.off)
		rows, ready := readinessOf(t, db)
		require.False(t, ready)
		require.False(t, checkRow(rows, "triggers").OK, tc.off)
		require.Contains(t, checkRow(rows, "triggers").Detail, tc.reason, tc.off)
		mustExec(t, db, tc.on)
	}
}

// ---------------------------------------------------------------------------
// Stream reset in progress.
// ---------------------------------------------------------------------------

// Sound: a stream reset opened on a healthy stream makes readiness false (the old
// stream is blocked: docs/reset.md "Readiness is false while a reset is open"; the
// runner's state is resetting) and /metrics synchro_ready 0; after abort_reset it is
// ready again. Not parallel: a reset creates a slot with an exported snapshot, which
// waits for every xid-holding transaction of the cluster (the reset tests' rule).
func TestObserveEdgeResetOpenNotReady(t *testing.T) {
	db, rr := readyMetricsRunner(t)
	op := newOperator(t, db)
	id := op.begin(t, "review: readiness during a reset")
	start := time.Now()
	var rows []readinessRow
	require.True(t, within(10*time.Second, func() bool {
		var ready bool
		rows, ready = readinessOf(t, db)
		return !ready
	}), "ready with a reset open:\n%s", readinessString(rows))
	t.Logf("not ready %.2fs after begin_reset:\n%s", time.Since(start).Seconds(), readinessString(rows))
	require.True(t, within(10*time.Second, func() bool { return reviewGauge(t, rr, "synchro_ready") == 0 }))
	// And it stays not ready while the reset is open.
	for range 10 {
		rows, ready := readinessOf(t, db)
		require.False(t, ready, "phase %s:\n%s", op.status(t, id).Phase, readinessString(rows))
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	waitReady(t, db)
}

// ---------------------------------------------------------------------------
// Registry activation pending, projection bootstrap in progress.
// ---------------------------------------------------------------------------

// Sound: a staged (pending, not activated) registration leaves the active generation as
// it is, and readiness stays ready. Once activated, a table that already holds rows is
// projected by the bootstrap before it serves: at every look until then, a rebuild of
// its scope answers SY503 or the complete baseline, never part of it, whatever
// readiness says meanwhile (CONTRACT.md activate_registry: "Rows already in a newly
// registered relation are projected by the projection bootstrap before that relation
// serves pulls"; docs/bootstrap.md "Clients").
func TestObserveEdgeBootstrapReadiness(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `CREATE TABLE extra (id int8 PRIMARY KEY, owner text);
		INSERT INTO extra SELECT g, 'x' FROM generate_series(1, 3000) g;`)
	mustExec(t, db, `SELECT synchro.register_table('extra', 'extra'); SELECT synchro.add_scope_rule('extra', 'grp:', 'owner');`)
	rows, ready := readinessOf(t, db)
	require.True(t, ready, "a pending registry generation changes nothing active:\n%s", readinessString(rows))

	mustExec(t, db, `SELECT synchro.activate_registry()`)
	notReady, pending := 0, 0
	deadline := time.Now().Add(90 * time.Second)
	for {
		rows, ready := readinessOf(t, db)
		if !ready {
			notReady++
		}
		p, err := rebuildRaw(db, "c1", "grp:x", "", 10000)
		if err != nil {
			requireSQLState(t, err, "SY503")
			pending++
		} else {
			require.Len(t, p.Rows, 3000, "a rebuild served part of the bootstrap (ready=%v):\n%s", ready, readinessString(rows))
			break
		}
		require.True(t, time.Now().Before(deadline), "the bootstrap did not merge:\n%s", readinessString(rows))
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("looks while the bootstrap was pending: rebuild SY503 %d, not ready %d", pending, notReady)
	waitReady(t, db)
}

// readyMetricsRunner is runnerSetup's database with a runner refreshing its metrics
// every 100 ms, streaming and ready.
func readyMetricsRunner(t *testing.T) (*testdb.DB, *runningRunner) {
	t.Helper()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.MetricsInterval = 100 * time.Millisecond
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitReady(t, db)
	return db, rr
}

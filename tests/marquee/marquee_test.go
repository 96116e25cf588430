// Package marquee is the crash-injection marquee: concurrent writers, pushes,
// dependency moves and registry activations run while `synchro run` processes are
// killed with SIGKILL at every named fault point (internal/fault) and at random, and
// PostgreSQL is stopped immediately and restarted; an oracle then checks that nothing
// was lost, duplicated or reordered (docs/reliability.md). It restarts PostgreSQL, so it
// has a package (and a private cluster) of its own.
//
//	go test ./tests/marquee -run Marquee -v                                  # CI size
//	go test ./tests/marquee -run Marquee -v -marquee.kills=200 -marquee.restarts=20   # make marquee
package marquee

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

var (
	flagKills    = flag.Int("marquee.kills", envInt("SYNCHRO_MARQUEE_KILLS", 50), "runner deaths at named fault points, at least (random kills come on top; SYNCHRO_MARQUEE_KILLS)")
	flagRestarts = flag.Int("marquee.restarts", envInt("SYNCHRO_MARQUEE_RESTARTS", 5), "PostgreSQL immediate restarts (SYNCHRO_MARQUEE_RESTARTS)")
	flagSeed     = flag.Uint64("marquee.seed", 0, "random seed (0: a fixed one under -short, else from the clock)")
)

// refClient is a reference client (package client) that syncs its scopes through the
// chaos and pushes.
type refClient struct {
	c      *client.Client
	scopes []string

	mu       sync.Mutex
	versions map[int]string // its pushed task keys -> last known version
	syncs    int
	syncErrs int
	lastErrs map[string]int // failed syncs by error text (sampled)
}

func (r *refClient) syncLoop(ctx context.Context) {
	for ctx.Err() == nil {
		for _, s := range r.scopes {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			err := r.c.Sync(sctx, s)
			cancel()
			r.mu.Lock()
			if err != nil {
				r.syncErrs++
				if r.lastErrs == nil {
					r.lastErrs = map[string]int{}
				}
				if msg := err.Error(); len(r.lastErrs) < 10 || r.lastErrs[msg] > 0 {
					r.lastErrs[msg]++
				}
			} else {
				r.syncs++
			}
			r.mu.Unlock()
		}
		sleep(ctx, 150*time.Millisecond)
	}
}

func TestMarquee(t *testing.T) {
	cluster := testdb.Cluster()
	if cluster == nil {
		t.Skip("the marquee crashes PostgreSQL: it needs the private cluster (not " + testdb.EnvDatabaseURL + ")")
	}
	// CI (-short) runs one fixed schedule of choices: a seed of its own on every run
	// made its verdict depend on which one it drew (found by review 2026-12-05). The
	// kills still land where the processes' timing puts them. make marquee draws a
	// seed from the clock, and logs it.
	seed := *flagSeed
	if seed == 0 && testing.Short() {
		seed = 1796148397535980046 // docs/reliability.md's CI-size run
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	kills, restarts := *flagKills, *flagRestarts
	t.Logf("marquee: seed %d (rerun with -marquee.seed=%d), at least %d runner deaths at fault points and %d PostgreSQL immediate restarts",
		seed, seed, kills, restarts)
	began := time.Now()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, schema)
	if err != nil {
		t.Fatal(err)
	}
	initial := liveState(t, ctx, db.Pool)
	bin := runproc.BuildT(t, runproc.FaultTag)
	slot := slotName(db.Name)

	// The oracle's own slot, for the commit order (commitLog): made before the first
	// audited write, read throughout, dropped at the end (testdb drops it too when the
	// test fails before).
	orderSlot := slotName(db.Name + "_order")
	commitLog, err := newCommitLog(ctx, db.URL, orderSlot)
	if err != nil {
		t.Fatal(err)
	}
	lctx, stopLog := context.WithCancel(ctx)
	var logWG sync.WaitGroup
	logWG.Go(func() { commitLog.run(lctx) })
	defer func() { stopLog(); logWG.Wait() }()

	sampler := &slotSampler{url: db.URL, slot: slot}
	sctx, stopSampler := context.WithCancel(ctx)
	var samplerWG sync.WaitGroup
	samplerWG.Go(func() { sampler.run(sctx) })
	defer func() { stopSampler(); samplerWG.Wait() }()

	cond := newConductor(t, bin, db.URL, slot, cluster, seed)
	// First starts die after creating the slot and inside the baseline transaction;
	// then one start makes the stream (no writer runs before it: the model starts from
	// the rows at generation_start).
	cond.baselinePhase(ctx, 1)
	p := cond.start("")
	waitFor(t, 60*time.Second, "the stream to exist", func() bool {
		var n int
		return db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.progress`).Scan(&n) == nil && n == 1
	})
	p.Kill()
	cond.ended(p, "")
	cond.waitGone(ctx)

	// Reference clients: each has its own pool (they retry through the crashes).
	clientPool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer clientPool.Close()
	scopeSets := [][]string{
		{"owner:a", "owner:b", "user:u1"},
		{"owner:c", "user:u2", "user:u3"},
		{"owner:d", "user:u4", "user:u5", "owner:a"},
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var clients []*refClient
	for i, scopes := range scopeSets {
		c, err := client.Open(ctx, client.Config{DB: clientPool, StorePath: filepath.Join(t.TempDir(), "replica.db"),
			ClientID: fmt.Sprintf("marquee-%d", i), Logger: quiet, PageSize: 50, RebuildPageSize: 50,
			Backoff: client.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: 20}, MaxRebuilds: 10})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, s := range scopes {
			if err := c.Subscribe(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		clients = append(clients, &refClient{c: c, scopes: scopes, versions: map[int]string{}})
	}

	var pushers []*refClient
	for i := range 2 {
		c, err := client.Open(ctx, client.Config{DB: clientPool, StorePath: ":memory:", ClientID: fmt.Sprintf("pusher-%d", i), Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		pushers = append(pushers, &refClient{c: c, versions: map[int]string{}})
	}

	writerPool, err := pgxpool.New(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer writerPool.Close()
	w := &workload{pool: writerPool, clients: clients, pushers: pushers, seed: seed}
	cond.quiet = w.paused.Store
	wctx, stopWork := context.WithCancel(ctx)
	var workWG sync.WaitGroup
	workWG.Go(func() { w.run(wctx) })
	for _, c := range clients {
		workWG.Go(func() { c.syncLoop(wctx) })
	}

	cond.streamPhase(ctx, kills, restarts)
	stopWork()
	workWG.Wait()
	chaosEnd := time.Now()

	// Quiescence: one runner without a fault materializes everything that committed.
	final := cond.start("")
	defer final.Kill()
	// When the stream cannot catch up (a runner refuses to go on), the oracle still
	// runs: it says what was lost.
	// The wait lasts as long as the stream makes progress (at most two minutes
	// without any).
	pending := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT DISTINCT xid FROM marquee_audit) a
			WHERE NOT EXISTS (SELECT 1 FROM synchro.txn t WHERE t.xid % 4294967296 = a.xid)`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	caught := false
	for last, stalled := -1, time.Now(); !final.Exited() && time.Since(stalled) < 2*time.Minute; time.Sleep(200 * time.Millisecond) {
		n := pending()
		if n == 0 {
			caught = true
			break
		}
		if n >= 0 && n != last {
			last, stalled = n, time.Now()
		}
	}
	caught = caught && await(time.Minute, func() bool {
		var ok bool
		err := db.Pool.QueryRow(ctx, `SELECT s.confirmed_flush_lsn = p.processed_end_lsn AND p.acknowledged_end_lsn = p.processed_end_lsn
			FROM pg_replication_slots s, synchro.progress p WHERE s.slot_name = $1`, slot).Scan(&ok)
		return err == nil && ok
	})
	if !caught {
		t.Errorf("the final runner did not catch up and acknowledge (%s):\n%s", final.Exit(), tailLines(final.Logs(), 40))
	}
	caughtUp := time.Now()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Every audited transaction committed before the catch-up: one last read of the
	// oracle's slot decodes them all.
	stopLog()
	logWG.Wait()
	if err := commitLog.read(ctx, conn); err != nil {
		t.Fatalf("reading the oracle's slot: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, orderSlot); err != nil {
		t.Errorf("dropping the oracle's slot: %v", err)
	}
	order := commitLog.commits()
	audit, txns, events, effects, err := collect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	v := judge(audit, txns, events, effects, order, initial)
	var quarantined int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM synchro.quarantine`).Scan(&quarantined); err != nil {
		t.Fatal(err)
	}

	// Convergence: every reference client, and a client that starts now, equals the
	// live tables in every scope.
	late, err := client.Open(ctx, client.Config{DB: clientPool, StorePath: ":memory:", ClientID: "marquee-late", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	lateScopes := []string{"owner:a", "owner:b", "owner:c", "owner:d", "owner:", "user:u1", "user:u2", "user:u3", "user:u4", "user:u5"}
	for _, s := range lateScopes {
		if err := late.Subscribe(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	diverged := 0
	check := func(name string, c *client.Client, scopes []string) {
		if !caught {
			return // nothing to converge to
		}
		for _, s := range scopes {
			if err := c.Sync(ctx, s); err != nil {
				t.Errorf("client %s: sync %s: %v", name, s, err)
				diverged++
				continue
			}
			want := liveScope(t, ctx, conn, s, w.extras)
			got := replicaOf(t, ctx, c, s)
			if d := diff(want, got); d != "" {
				t.Errorf("client %s scope %s differs from the live tables: %s", name, s, d)
				diverged++
			}
		}
	}
	syncs, syncErrs := 0, 0
	for i, c := range clients {
		check(fmt.Sprint(i), c.c, c.scopes)
		syncs += c.syncs
		syncErrs += c.syncErrs
		for msg, n := range c.lastErrs {
			t.Logf("client %d: %d failed syncs during the chaos: %s", i, n, msg)
		}
	}
	check("late", late, lateScopes)

	if err := final.Stop(30 * time.Second); err != nil {
		t.Errorf("final runner: %v\n%s", err, tailLines(final.Logs(), 40))
	}
	stopSampler()
	samplerWG.Wait()

	figures := fmt.Sprintf("kills=%d pg_restarts=%d source_txns=%d loss=%d dups=%d (kills at fault points: %d)",
		cond.kills(), cond.restarts, v.sourceTxns, v.loss, v.dups, cond.namedKills())
	t.Log(figures)
	fmt.Println("marquee: " + figures)
	t.Logf("marquee: %s", cond.summary())
	t.Logf("marquee: source events %d, materialized transactions %d, effects %d; workload: %d direct transactions, %d pushes, %d registry activations, %d failed writes",
		v.sourceEvents, len(txns), v.effects, w.txns.Load(), w.pushes.Load(), w.activations.Load(), w.errors.Load())
	t.Logf("marquee: the oracle's slot decoded %d commits in %d reads, %s (last failed read: %v)",
		len(order), commitLog.reads, commitLog.busy.Round(time.Millisecond), commitLog.err)
	t.Logf("marquee: slot samples %d; client syncs %d (%d failed during the chaos); chaos %s, catch-up %s, total %s",
		sampler.samples, syncs, syncErrs, chaosEnd.Sub(began).Round(time.Second), caughtUp.Sub(chaosEnd).Round(time.Second),
		time.Since(began).Round(time.Second))

	for _, p := range v.problems {
		t.Error(p)
	}
	for _, s := range sampler.violations {
		t.Error(s)
	}
	for _, e := range cond.exits {
		t.Errorf("a runner exited on its own: %s", e)
	}
	if v.loss != 0 || v.dups != 0 {
		t.Errorf("loss=%d dups=%d", v.loss, v.dups)
	}
	if quarantined != 0 {
		t.Errorf("%d quarantined transactions", quarantined)
	}
	if cond.namedKills() < kills || cond.restarts < restarts {
		t.Errorf("only %d deaths at fault points and %d restarts", cond.namedKills(), cond.restarts)
	}
	for _, pt := range fault.Points {
		if pt == fault.BootstrapStaging || pt == fault.BootstrapStaged {
			// Reached only while a projection bootstrap of a table holding rows is staged,
			// which the marquee's workload never asks for (its activations register empty
			// tables): killed there by TestBootstrapRunnerKilled, TestBootstrapStageVerified
			// and TestBootstrapSubsumedByReset (tests/bootstrap_snapshot_test.go).
			continue
		}
		if cond.named[pt] == 0 {
			t.Errorf("no runner died at fault point %s", pt)
		}
	}
	if v.sourceTxns == 0 || sampler.samples == 0 {
		t.Errorf("nothing was written or sampled")
	}
}

// await polls cond until it holds (true) or timeout passes (false).
func await(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

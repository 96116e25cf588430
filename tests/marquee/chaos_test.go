package marquee

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/tests/runproc"
)

// streamPoints are the fault points a running stream reaches, cycled through by the
// conductor; slot-created and baseline are reached only by a first start (the
// baseline phase).
var streamPoints = []fault.Point{fault.AfterSlotAck, fault.Reconcile, fault.Idle, fault.Decode, fault.Copy,
	fault.Prepared, fault.BeforeCommit, fault.AfterCommit, fault.StatusSent}

// reachCount draws the n of SYNCHRO_FAULT=point:n: how many reaches pass first.
func reachCount(rng *rand.Rand, p fault.Point) int64 {
	switch p {
	case fault.Decode:
		return 1 + rng.Int64N(60)
	case fault.StatusSent:
		return 1 + rng.Int64N(6)
	case fault.Reconcile, fault.SlotCreated, fault.Baseline:
		return 1
	default:
		return 1 + rng.Int64N(4)
	}
}

// conductor starts `synchro run` processes and kills them, and crashes PostgreSQL.
type conductor struct {
	t       *testing.T
	bin     string
	url     string
	slot    string
	cluster *pgcluster.Cluster
	rng     *rand.Rand

	named    map[fault.Point]int // deaths at a fault point, by point
	missed   map[fault.Point]int // armed points not reached in time (then killed from outside)
	random   int                 // SIGKILLs from outside at a random moment
	restarts int                 // PostgreSQL immediate stops and starts
	exits    []string            // processes that exited on their own (a failure)

	// quiet holds the writers back (true) or lets them go (false).
	quiet func(bool)
	// last is the last process started, for a report.
	last *runproc.Proc
}

// killStall bounds the stream phase's wait for its next death at a fault point. Each
// armed process is waited for a few seconds and then killed from outside, so a runner
// that no longer reaches any fault point would make the phase loop until the package's
// timeout; this turns that into a failure that says where it stopped. It is a hang
// detector, not a budget: deaths come every few seconds, so minutes without one is no
// slow machine.
const killStall = 5 * time.Minute

func newConductor(t *testing.T, bin, url, slot string, cluster *pgcluster.Cluster, seed uint64) *conductor {
	return &conductor{t: t, bin: bin, url: url, slot: slot, cluster: cluster, rng: rand.New(rand.NewPCG(seed, 99)),
		named: map[fault.Point]int{}, missed: map[fault.Point]int{}}
}

// kills counts every SIGKILL of a runner: at a fault point or from outside.
func (c *conductor) kills() int { return c.random + c.namedKills() }

// namedKills counts the deaths at a fault point.
func (c *conductor) namedKills() int {
	n := 0
	for _, k := range c.named {
		n += k
	}
	return n
}

// start runs `synchro run`, armed with spec ("" for none). Batches of staged rows are
// small, so a batch takes several COPYs.
func (c *conductor) start(spec string) *runproc.Proc {
	c.t.Helper()
	p, err := runproc.Start(runproc.Options{Bin: c.bin, DatabaseURL: c.url, Slot: c.slot, Fault: spec,
		Args: []string{"--batch-bytes", "2048"}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.last = p
	return p
}

// ended records how p ended; a process that exited on its own is a failure.
func (c *conductor) ended(p *runproc.Proc, armed fault.Point) {
	switch {
	case p.Killed() && armed != "" && p.FaultReached() == armed:
		c.named[armed]++
	case p.Killed():
		c.random++
		if armed != "" {
			c.missed[armed]++
		}
	default:
		c.exits = append(c.exits, fmt.Sprintf("%s (armed %q):\n%s", p.Exit(), armed, tailLines(p.Logs(), 30)))
	}
}

func tailLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// named runs one process armed at point and waits for its death there (at most
// wait); if the point is not reached in time, it is killed from outside.
func (c *conductor) namedKill(ctx context.Context, point fault.Point, wait time.Duration) {
	spec := fault.Spec{Point: point, N: reachCount(c.rng, point)}.String()
	// Idle boundaries come only while no source transaction streams, and under a
	// steady load the acknowledgement is recorded only between batches: these two
	// points are armed while the writers hold back.
	if (point == fault.Idle || point == fault.AfterSlotAck) && c.quiet != nil {
		c.quiet(true)
		defer c.quiet(false)
	}
	p := c.start(spec)
	if !p.Wait(wait) {
		p.Kill()
	}
	c.ended(p, point)
	c.waitGone(ctx)
}

// randomKill runs one process and SIGKILLs it after a random time.
func (c *conductor) randomKill(ctx context.Context) {
	p := c.start("")
	sleep(ctx, time.Duration(100+c.rng.IntN(2000))*time.Millisecond)
	if !p.Exited() {
		p.Kill()
	}
	c.ended(p, "")
	c.waitGone(ctx)
}

// crash stops PostgreSQL immediately (SIGQUIT to the postmaster, what `pg_ctl stop -m
// immediate` sends: no checkpoint, crash recovery at the next start) under a running
// runner and the writers, then starts it again; the runner reconnects on its own, runs
// a while and is killed, sometimes while PostgreSQL is down.
func (c *conductor) crash(ctx context.Context) {
	p := c.start("")
	// The crash hits a runner that streams: a crash before its first claim only
	// delays that claim (retried with backoff, TestRunnerWaitsForDatabaseAtStart),
	// which is not what this step tests.
	deadline := time.Now().Add(30 * time.Second)
	for !p.Exited() && time.Now().Before(deadline) {
		if n, err := countSessions(ctx, c.url, "synchro-runner-apply"); err == nil && n > 0 {
			break
		}
		sleep(ctx, 20*time.Millisecond)
	}
	sleep(ctx, time.Duration(200+c.rng.IntN(1500))*time.Millisecond)
	if err := c.cluster.StopImmediate(); err != nil {
		c.t.Fatalf("stop immediate: %v", err)
	}
	c.restarts++
	sleep(ctx, time.Duration(100+c.rng.IntN(700))*time.Millisecond)
	killedDown := c.rng.IntN(3) == 0
	if killedDown {
		p.Kill()
	}
	if err := c.cluster.Restart(ctx); err != nil {
		c.t.Fatalf("start after an immediate stop: %v", err)
	}
	if !killedDown {
		sleep(ctx, time.Duration(500+c.rng.IntN(2500))*time.Millisecond)
		if !p.Exited() {
			p.Kill()
		}
	}
	c.ended(p, "")
	c.waitGone(ctx)
}

// waitGone waits until the dead runner's sessions are gone from the server (its claim
// goes with its control session).
func (c *conductor) waitGone(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n, err := countRunnerSessions(ctx, c.url)
		if err == nil && n == 0 {
			return
		}
		sleep(ctx, 20*time.Millisecond)
	}
	c.t.Fatalf("the killed runner's sessions did not end")
}

func countRunnerSessions(ctx context.Context, url string) (int, error) {
	return countSessions(ctx, url, "synchro-runner%")
}

// countSessions counts the sessions of url's database whose application_name is LIKE
// app.
func countSessions(ctx context.Context, url, app string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(cctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE $1`, app).Scan(&n)
	return n, err
}

// baselinePhase kills first starts: after the slot is created and while the baseline
// transaction is open. Each death leaves a slot without a stream; the next first
// start drops it and makes a new one.
func (c *conductor) baselinePhase(ctx context.Context, rounds int) {
	for range rounds {
		for _, pt := range []fault.Point{fault.SlotCreated, fault.Baseline} {
			c.namedKill(ctx, pt, 30*time.Second)
		}
	}
}

// streamPhase cycles through the stream's fault points, with random kills and
// PostgreSQL crashes spread among them, until both targets are met: kills deaths at
// fault points (random kills come on top) and restarts crashes.
func (c *conductor) streamPhase(ctx context.Context, kills, restarts int) {
	next := 0
	every := max(1, kills/max(1, restarts))
	progress, progressAt := c.namedKills(), time.Now()
	armed := map[fault.Point]int{} // armed since the last death at a fault point
	for step := 1; ctx.Err() == nil && (c.namedKills() < kills || c.restarts < restarts); step++ {
		var pt fault.Point
		switch {
		case c.restarts < restarts && step%every == 0:
			c.crash(ctx)
		case c.rng.IntN(6) == 0:
			c.randomKill(ctx)
		default:
			pt = streamPoints[next%len(streamPoints)]
			wait := 8 * time.Second
			if pt == fault.Reconcile {
				wait = 3 * time.Second // reached at a start, or not at all
			}
			armed[pt]++
			c.namedKill(ctx, pt, wait)
			next++
		}
		if n := c.namedKills(); n > progress {
			progress, progressAt = n, time.Now()
			clear(armed)
		} else if time.Since(progressAt) > killStall {
			c.stalled("stream", pt, armed, kills, restarts)
		}
	}
}

// stalled fails the test: no runner died at a fault point for killStall.
func (c *conductor) stalled(phase string, pt fault.Point, armed map[fault.Point]int, kills, restarts int) {
	c.t.Helper()
	tried := make([]string, 0, len(armed))
	for p, n := range armed {
		tried = append(tried, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(tried)
	logs := "(no process)"
	if c.last != nil {
		logs = tailLines(c.last.Logs(), 30)
	}
	c.t.Fatalf("%s phase: no runner died at a fault point for %s (the last step armed %q; armed meanwhile, none reached: %s); "+
		"so far %d of %d deaths at fault points, %d random kills, %d of %d PostgreSQL restarts; %s\nthe last runner's log:\n%s",
		phase, killStall, pt, strings.Join(tried, " "), c.namedKills(), kills, c.random, c.restarts, restarts, c.summary(), logs)
}

func (c *conductor) summary() string {
	pts := make([]string, 0, len(c.named))
	for p, n := range c.named {
		pts = append(pts, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(pts)
	miss := make([]string, 0, len(c.missed))
	for p, n := range c.missed {
		miss = append(miss, fmt.Sprintf("%s=%d", p, n))
	}
	sort.Strings(miss)
	return fmt.Sprintf("named kills: %s; random kills: %d; armed but not reached in time (killed from outside): %s",
		strings.Join(pts, " "), c.random, strings.Join(miss, " "))
}

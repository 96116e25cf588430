package tests

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// runnerSetup gives a database with one registered table, items, whose rows belong to
// scope "owner:<owner>", and rows 1 and 2 already there (the baseline).
func runnerSetup(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0, note text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO items (id, owner, v) VALUES (1, 'a', 1), (2, 'b', 2);`)
	return db
}

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

// runnerSlot names the slot after the test database: slot names are cluster-wide, and
// testdb drops the database's slots before the database goes.
func runnerSlot(db *testdb.DB) string {
	s := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(s) > 63 {
		s = s[len(s)-63:]
	}
	return s
}

// testLogWriter sends the runner's logs to the test log while the test runs.
type testLogWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// runningRunner is a runner started in-process.
type runningRunner struct {
	cancel  context.CancelFunc
	done    chan error
	metrics *prometheus.Registry
	runner  *runner.Runner
	stopped bool
	err     error
}

// wait stops nothing: it returns Run's result once Run returned (within timeout).
func (r *runningRunner) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	if r.stopped {
		return r.err
	}
	select {
	case r.err = <-r.done:
		r.stopped = true
		return r.err
	case <-time.After(timeout):
		t.Fatalf("runner did not return within %s", timeout)
		return nil
	}
}

// stop cancels the runner (a clean stop) and returns Run's result.
func (r *runningRunner) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t, 10*time.Second)
}

// counter reads a counter of the runner's metrics (0 when absent).
func (r *runningRunner) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := r.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// histogram reads the sample count and sum of a histogram of the runner's metrics.
func (r *runningRunner) histogram(t *testing.T, name string) (count uint64, sum float64) {
	t.Helper()
	mfs, err := r.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	return 0, 0
}

// testDecoders are the decoders the runner's end-to-end tests run under (eachDecoder).
var testDecoders = [...]string{"pgoutput", "wal2json"}

// eachDecoder runs test once per decoder, as subtest "decoder=<name>": the runner
// configurations the test makes (testRunnerConfig) use that decoder. One matrix, not
// copies: the runner's end-to-end tests (ordering, poison classes, drift, recovery)
// must hold under every decoder.
func eachDecoder(t *testing.T, test func(t *testing.T)) {
	t.Helper()
	for _, d := range testDecoders {
		t.Run("decoder="+d, func(t *testing.T) {
			if d == "wal2json" {
				// The version matrix's PostgreSQL 16-18 packages have no wal2json.
				testdb.RequireLibrary(t, "wal2json")
			}
			test(t)
		})
	}
}

// decoderOf is the decoder eachDecoder chose for t (from its subtest name), pgoutput
// outside eachDecoder.
func decoderOf(t testing.TB) string {
	for _, part := range strings.Split(t.Name(), "/") {
		if d, ok := strings.CutPrefix(part, "decoder="); ok {
			return d
		}
	}
	return "pgoutput"
}

// testRunnerConfig is a runner configuration with short intervals, decoding with
// the decoder eachDecoder chose (pgoutput outside it).
func testRunnerConfig(t *testing.T, db *testdb.DB) runner.Config {
	w := &testLogWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return runner.Config{
		DatabaseURL:       db.URL,
		Slot:              runnerSlot(db),
		Decoder:           decoderOf(t),
		Owner:             "test",
		HeartbeatInterval: 250 * time.Millisecond,
		StandbyInterval:   time.Second,
		ReceiveTimeout:    5 * time.Second,
		IdleInterval:      100 * time.Millisecond,
		PollInterval:      20 * time.Millisecond,
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        300 * time.Millisecond,
		ShutdownTimeout:   5 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// startRunner runs a runner in a goroutine until the test ends (or stop).
func startRunner(t *testing.T, cfg runner.Config) *runningRunner {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = runner.NewMetrics(reg)
	r, err := runner.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	rr := &runningRunner{cancel: cancel, done: make(chan error, 1), metrics: reg, runner: r}
	go func() { rr.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if !rr.stopped {
			select {
			case rr.err = <-rr.done:
				rr.stopped = true
			case <-time.After(10 * time.Second):
				t.Errorf("runner did not stop")
			}
		}
	})
	return rr
}

// eventually polls cond every 10ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool, diag ...func()) {
	t.Helper()
	// A floor under every wait: every walsender of the cluster decodes every parallel
	// test's WAL, and on a loaded CI machine a single write once took more than 10 s to
	// become visible (TestReconfigureColumnsAndRules, TestRunnerMetricsGauges, with the
	// whole package at 355 s instead of 151). A wait is an upper bound only: the floor
	// costs a passing run nothing.
	timeout = max(timeout, minWait)
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			for _, d := range diag {
				d() // what the wait was stuck on
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// minWait is the shortest wait eventually allows.
const minWait = 60 * time.Second

// progressRow is synchro.runner_state() as text.
type progressRow struct {
	Generation                                       int64
	Start, Materialized, Processed, Acked, PoisonCmt *string
	PoisonClass                                      *string
	Retry                                            *bool
}

func runnerState(t *testing.T, db *testdb.DB) (progressRow, bool) {
	t.Helper()
	var p progressRow
	err := db.Pool.QueryRow(context.Background(), `
		SELECT stream_generation, generation_start_lsn::text, materialized_commit_lsn::text,
		       processed_end_lsn::text, acknowledged_end_lsn::text, poison_commit_lsn::text,
		       poison_class, retry_requested
		FROM synchro.runner_state()`).
		Scan(&p.Generation, &p.Start, &p.Materialized, &p.Processed, &p.Acked, &p.PoisonCmt, &p.PoisonClass, &p.Retry)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false
	}
	require.NoError(t, err)
	return p, true
}

func lsnOf(t *testing.T, s *string) pglogrepl.LSN {
	t.Helper()
	if s == nil {
		return 0
	}
	l, err := pglogrepl.ParseLSN(*s)
	require.NoError(t, err)
	return l
}

// slotLSN is the slot's confirmed_flush_lsn.
func slotLSN(t *testing.T, db *testdb.DB) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, runnerSlot(db)).Scan(&s))
	l, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return l
}

// logClusterActivity logs what every session of the cluster that holds an xid or a
// snapshot, and every walsender, is doing: what a stuck slot creation (which waits
// for every xid-holding transaction of the cluster), a stuck materialization or a
// stuck catch-up waits for. Only the pack's and the tests' statements appear, cut.
func logClusterActivity(t *testing.T, db *testdb.DB, label string) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT coalesce(datname, '') || ' pid=' || pid || ' app=' || coalesce(application_name, '') || ' state=' ||
		       coalesce(state, '') || ' xid=' || coalesce(backend_xid::text, '') || ' xmin=' || coalesce(backend_xmin::text, '') ||
		       ' xact=' || coalesce((now() - xact_start)::text, '') || ' stmt=' || coalesce((now() - query_start)::text, '') ||
		       ' wait=' || coalesce(wait_event_type || '/' || wait_event, '') || ' ' || left(coalesce(query, ''), 160)
		  FROM pg_stat_activity
		 WHERE backend_xid IS NOT NULL OR backend_xmin IS NOT NULL OR backend_type = 'walsender'
		    OR datname = current_database()`)
	if err != nil {
		t.Logf("%s: %v", label, err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var line string
		if rows.Scan(&line) == nil {
			t.Logf("%s: %s", label, line)
		}
	}
}

// waitStream waits for the runner's first start (slot and baseline).
func waitStream(t *testing.T, db *testdb.DB) progressRow {
	t.Helper()
	var p progressRow
	// Slot creation waits for every transaction running in the cluster (parallel
	// tests hold some), so this can take a while under load; a timeout says which.
	eventually(t, 60*time.Second, "the stream to exist", func() bool {
		var ok bool
		p, ok = runnerState(t, db)
		return ok
	}, func() { logClusterActivity(t, db, "waiting for the stream") })
	return p
}

// waitStreamOrExit is waitStream for a runner that may refuse to start: Run
// returning first fails the test with what, and the runner's error.
func waitStreamOrExit(t *testing.T, db *testdb.DB, rr *runningRunner, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, ok := runnerState(t, db); ok {
			return
		}
		select {
		case err := <-rr.done:
			rr.stopped, rr.err = true, err
			t.Fatalf("%s: %v", what, err)
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the stream to exist")
	}
}

// waitAcked waits until the slot and the recorded acknowledgement reach the processed
// boundary (the runner is idle and caught up).
func waitAcked(t *testing.T, db *testdb.DB) progressRow {
	t.Helper()
	var p progressRow
	eventually(t, 5*time.Second, "acknowledgement of the processed boundary", func() bool {
		var ok bool
		p, ok = runnerState(t, db)
		if !ok || p.Acked == nil {
			return false
		}
		return *p.Acked == *p.Processed && slotLSN(t, db) == lsnOf(t, p.Processed)
	})
	return p
}

// effectRow is one pull effect.
type effectRow struct {
	CommitLSN     string
	EventOrdinal  int
	EffectOrdinal int
	Scope         string
	PK            string
	Op            string
	Version       *string
}

func (e effectRow) String() string {
	return fmt.Sprintf("%s/%d/%d %s %s %s", e.CommitLSN, e.EventOrdinal, e.EffectOrdinal, e.Scope, e.PK, e.Op)
}

// effects lists synchro.effect in stream-position order (ORDER BY the qualified pg_lsn
// column: a bare commit_lsn would name the text output column, out of order past
// 0/10000000).
func effects(t *testing.T, db *testdb.DB) []effectRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT e.commit_lsn::text, e.event_ordinal, e.effect_ordinal, e.scope, e.pk, e.op, e.version
		FROM synchro.effect e ORDER BY e.commit_lsn, e.event_ordinal, e.scope, e.effect_ordinal`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (effectRow, error) {
		var e effectRow
		return e, r.Scan(&e.CommitLSN, &e.EventOrdinal, &e.EffectOrdinal, &e.Scope, &e.PK, &e.Op, &e.Version)
	})
	require.NoError(t, err)
	return out
}

// waitEffects waits until synchro.effect holds n rows.
func waitEffects(t *testing.T, db *testdb.DB, n int) []effectRow {
	t.Helper()
	var got []effectRow
	eventually(t, 5*time.Second, fmt.Sprintf("%d effects", n), func() bool {
		got = effects(t, db)
		return len(got) >= n
	})
	require.Len(t, got, n, "%v", got)
	return got
}

func countOf(t *testing.T, db *testdb.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// textOf runs a query of one text value.
func textOf(t *testing.T, db *testdb.DB, sql string, args ...any) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&s))
	return s
}

// quarantine is the blocking quarantine record, if any.
type quarantineRow struct {
	CommitLSN  string
	Class      string
	RelationID *int64
	Attempts   int
	Resolved   bool
}

func quarantines(t *testing.T, db *testdb.DB) []quarantineRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT q.commit_lsn::text, q.failure_class, q.relation_id, q.attempts, q.resolved_at IS NOT NULL
		FROM synchro.quarantine q ORDER BY q.commit_lsn`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (quarantineRow, error) {
		var q quarantineRow
		return q, r.Scan(&q.CommitLSN, &q.Class, &q.RelationID, &q.Attempts, &q.Resolved)
	})
	require.NoError(t, err)
	return out
}

// itemsRelationID is the relation id of items.
func itemsRelationID(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT relation_id FROM synchro.relation WHERE table_id = 'items'`).Scan(&id))
	return id
}

// waitRunnerGone waits until no session of a stopped or dead runner is left on the
// server: a client that vanishes leaves its backend (and its claim) behind for a moment.
func waitRunnerGone(t *testing.T, db *testdb.DB) {
	t.Helper()
	eventually(t, 5*time.Second, "the previous runner's sessions to end", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'synchro-runner%'`) == 0
	})
}

// holdMaterialization takes a SHARE lock on synchro.txn, which only materialization
// writes (the ledger row of each source transaction, near the end of
// materialize_batch), so that the runner's apply session waits inside its
// materialization transaction with the batch in hand. held returns once it waits;
// release commits the lock (the test's end rolls it back otherwise).
func holdMaterialization(t *testing.T, db *testdb.DB) (held, release func()) {
	t.Helper()
	ctx := context.Background()
	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(ctx) })
	_, err = hold.Exec(ctx, `LOCK TABLE synchro.txn IN SHARE MODE`)
	require.NoError(t, err)
	held = func() {
		t.Helper()
		eventually(t, 30*time.Second, "the apply session to wait inside the materialization", func() bool {
			// This database's (test databases are clones of one template: a parallel
			// test's synchro.txn has the same OID).
			return countOf(t, db, `SELECT count(*) FROM pg_locks WHERE relation = 'synchro.txn'::regclass AND NOT granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) > 0
		})
	}
	release = func() {
		t.Helper()
		require.NoError(t, hold.Commit(ctx))
	}
	return held, release
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/wal2json"
)

// The materialize suite: materialized row events per second of the runner against the
// raw decode rate of the same WAL (pg_recvlogical, pgoutput, into /dev/null), measured
// in the same run, for 1-row and 1,000-row source transactions.
func init() {
	registerSuite("materialize", suite{
		summary: "runner row events/s vs raw pgoutput decode (pg_recvlogical) of the same WAL, 1-row and 1,000-row inserts, 1-row updates",
		run:     runMaterialize,
	})
}

// goalMaterialize: materialized/raw ≥ 0.5 for both shapes; below it a profile is due.
const goalMaterialize = 0.5

// matShape is one kind of source transaction.
type matShape struct {
	name    string
	rows    int // rows per source transaction
	txns    int // source transactions per run
	clients int
	// update: each transaction updates one existing row (rows is 1), moving it to a
	// random scope, instead of inserting. Every row then has memberships and a
	// projection to replace: the work tables the inserts leave empty (the memberships
	// a row held before) are full, so a plan that rescans one per row shows here.
	update bool
	// dep: each transaction updates one dependency row (rows is 1), moving the depFanout
	// synced rows it reaches through a via rule to another scope: the per-transaction
	// reference path, with membership evaluated for every row reached.
	dep bool
}

// The dependency shape's tables: docs (synced) in user: scopes through teams (a
// capture dependency), depFanout docs per team.
const (
	depTeams  = 1000
	depFanout = 10
)

var depSetup = fmt.Sprintf(`
CREATE TABLE public.teams (id bigint PRIMARY KEY, team text NOT NULL, member text NOT NULL);
CREATE TABLE public.docs (id bigint PRIMARY KEY, team text NOT NULL, body text NOT NULL);
INSERT INTO public.teams SELECT i, 't' || i, 'u' || (i %% 100) FROM generate_series(1, %[1]d) i;
INSERT INTO public.docs SELECT i, 't' || (1 + i %% %[1]d), '%[3]s' FROM generate_series(1, %[1]d * %[2]d) i;
SELECT synchro.register_dependency('public.teams', ARRAY['team', 'member']::name[]);
SELECT synchro.register_table('public.docs', 'docs');
SELECT synchro.add_scope_rule('docs', 'user:', 'team', 'public.teams', 'team', 'member');
SELECT synchro.activate_registry();`, depTeams, depFanout, payload64)

// key names a shape's scripts and slots.
func (sh matShape) key() string {
	if sh.update {
		return fmt.Sprintf("upd_%d", sh.rows)
	}
	if sh.dep {
		return "dep"
	}
	return fmt.Sprintf("%d", sh.rows)
}

// matRun is one measurement of one shape.
type matRun struct {
	txns, events     int64
	rawSec, synSec   float64
	rawLoad, synLoad float64
	rawWalsenderCPU  float64 // CPU seconds of pg_recvlogical's walsender
	rawClientCPU     float64 // CPU seconds of pg_recvlogical itself
	synWalsenderCPU  float64 // the runner's walsender
	synApplyCPU      float64 // the runner's apply backend (staging COPY + materialize)
	synRunnerCPU     float64 // the runner's Go code (this process)
	synSpillTxns     int64   // transactions the runner's walsender spilled to disk (pg_stat_replication_slots)
	synSpillBytes    int64   // and the bytes it spilled
	srcRecords       int64   // WAL records of the source writes (what the raw decode reads)
	matRecords       int64   // WAL records written while the runner ran (what its walsender reads on top)
	walBytes         int64
	floorSec         float64 // the write floor: the run's materialized rows copied, nothing computed
	floorParts       string  // the write floor's time by table
	phases           string  // where the run's wall time went, untimed parts included
}

// phaseClock notes how long each part of a run took, measured or not: what a
// benchmark's own wall time goes to (make bench-quick has a budget in CI).
type phaseClock struct {
	last  time.Time
	parts []string
}

func newPhaseClock() *phaseClock { return &phaseClock{last: time.Now()} }

// lap ends the part named name.
func (c *phaseClock) lap(name string) {
	now := time.Now()
	c.parts = append(c.parts, fmt.Sprintf("%s %.1f", name, now.Sub(c.last).Seconds()))
	c.last = now
}

func (c *phaseClock) String() string { return strings.Join(c.parts, ", ") + " s" }

func (r matRun) rawRate() float64 { return float64(r.events) / r.rawSec }
func (r matRun) synRate() float64 { return float64(r.events) / r.synSec }
func (r matRun) floorRate() float64 {
	if r.floorSec <= 0 {
		return 0
	}
	return float64(r.events) / r.floorSec
}

// matScript is a shape's pgbench script; an update shape picks rows among ids 1..maxID.
func matScript(sh matShape, maxID int64) string {
	rows := sh.rows
	if sh.dep {
		return fmt.Sprintf("\\set id random(1, %d)\n\\set m random(1, 100)\n"+
			"UPDATE public.teams SET member = 'u' || :m WHERE id = :id;\n", depTeams)
	}
	if sh.update {
		return fmt.Sprintf("\\set id random(1, %d)\n\\set o random(1, 100)\n"+
			"UPDATE public.items SET owner = 'o' || :o, v = v + 1 WHERE id = :id;\n", maxID)
	}
	if rows == 1 {
		return "\\set o random(1, 100)\n\\set v random(1, 1000000)\n" +
			"INSERT INTO public.items (owner, v, payload) VALUES ('o' || :o, :v, '" + payload64 + "');\n"
	}
	return fmt.Sprintf("INSERT INTO public.items (owner, v, payload) SELECT 'o' || (g %% 100), g, '%s' FROM generate_series(1, %d) g;\n",
		payload64, rows)
}

// matEnv is the materialize suite's database.
type matEnv struct {
	b       *bench
	decoder string // the runner's decoder
	cluster *pgcluster.Cluster
	conn    *pgx.Conn
	url     string
	dbname  string
	// floor is a database with the pack installed on a cluster of its own (the
	// floor cluster), where the write floor is measured (writeFloor says why).
	floor *pgx.Conn
}

// runMaterialize runs the suite once per decoder (--decoder), each on a stream
// (database) of its own, and with several compares their materialization rates.
func runMaterialize(ctx context.Context, b *bench) (string, error) {
	var sb strings.Builder
	rates := make(map[string]map[string]float64) // decoder → shape → median synchro ev/s
	var ran []string
	for _, d := range b.cfg.matDecoders {
		if ok, err := decoderInstalled(ctx, b, d); err != nil {
			return "", fmt.Errorf("decoder %s: %w", d, err)
		} else if !ok {
			fmt.Fprintf(b.stdout, "decoder %s: the server has no usable output plugin for it (not installed, or refusing an option it needs): skipped\n", d)
			fmt.Fprintf(&sb, "\n(decoder %s skipped: the server has no usable output plugin for it)\n", d)
			continue
		}
		ran = append(ran, d)
		section, r, err := runMaterializeDecoder(ctx, b, d)
		if err != nil {
			return "", fmt.Errorf("decoder %s: %w", d, err)
		}
		sb.WriteString(section)
		rates[d] = r
	}
	if len(ran) > 1 {
		base := ran[0]
		fmt.Fprintf(&sb, "\n### materialize: decoders against %s, same run\n\n", base)
		sb.WriteString("| decoder | source txns | synchro ev/s | " + base + " ev/s | ratio |\n|---|---|---:|---:|---:|\n")
		for _, d := range ran[1:] {
			for _, shape := range []string{"1-row", "1,000-row"} {
				ratio := rates[d][shape] / rates[base][shape]
				b.record(fmt.Sprintf("materialize %s/%s %s", d, base, shape), ratio)
				fmt.Fprintf(&sb, "| %s | %s | %.0f | %.0f | %.3f |\n", d, shape, rates[d][shape], rates[base][shape], ratio)
			}
		}
	}
	return sb.String(), nil
}

// decoderInstalled reports whether the fast cluster's server has decoder's output
// plugin (pgoutput is built in; wal2json is a package of its own).
func decoderInstalled(ctx context.Context, b *bench, decoder string) (bool, error) {
	if decoder != wal2json.Name {
		return true, nil
	}
	c, err := b.fastCluster(ctx)
	if err != nil {
		return false, err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	err = wal2json.ProbeOptions(ctx, conn, wal2json.Options())
	if cl, ok := decode.ClassOf(err); ok && cl == decode.ClassCapabilityUnsupported {
		return false, nil
	}
	return err == nil, err
}

// runMaterializeDecoder is the suite under one decoder: its section and the median
// synchro rate per shape.
func runMaterializeDecoder(ctx context.Context, b *bench, decoder string) (string, map[string]float64, error) {
	dbname := "bench_materialize"
	if decoder != "pgoutput" {
		dbname += "_" + decoder
	}
	conn, url, err := b.newFastDatabase(ctx, dbname)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	fc, err := b.floorCluster(ctx)
	if err != nil {
		return "", nil, err
	}
	floor, _, err := newDatabase(ctx, fc, dbname+"_floor")
	if err != nil {
		return "", nil, err
	}
	defer floor.Close(ctx)
	e := &matEnv{b: b, decoder: decoder, cluster: b.fast, conn: conn, url: url, dbname: dbname, floor: floor}
	if _, err := conn.Exec(ctx, itemsTable+registerItems+`CREATE TABLE public.bench_tick (x int);`); err != nil {
		return "", nil, fmt.Errorf("setup: %w", err)
	}
	if b.cfg.matDepTxns > 0 {
		if _, err := conn.Exec(ctx, depSetup); err != nil {
			return "", nil, fmt.Errorf("setup of the dependency shape: %w", err)
		}
	}
	// First start: slot and (empty) baseline, then stop. Every later start resumes the
	// same slot, so it decodes exactly the WAL written while it was stopped.
	fmt.Fprintln(b.stdout, "first runner start (slot + baseline) ...")
	if err := e.firstStart(ctx); err != nil {
		return "", nil, err
	}

	shapes := []matShape{
		{name: "1-row", rows: 1, txns: b.cfg.matSmallTxns, clients: 2},
		{name: "1,000-row", rows: 1000, txns: b.cfg.matBigTxns, clients: 2},
		// After the inserts, which leave the rows it updates.
		{name: "1-row update", rows: 1, txns: b.cfg.matSmallTxns, clients: 2, update: true},
	}
	if b.cfg.matDepTxns > 0 {
		shapes = append(shapes, matShape{name: "1-row dependency", rows: 1, txns: b.cfg.matDepTxns, clients: 2, dep: true})
	}
	results := map[string][]matRun{}
	for _, sh := range shapes {
		for i := 0; i < b.cfg.repeat; i++ {
			fmt.Fprintf(b.stdout, "  %s %s run %d/%d: %d txns ... ", decoder, sh.name, i+1, b.cfg.repeat, sh.txns)
			r, err := e.measure(ctx, sh, fmt.Sprintf("bench_raw_%s_%d", sh.key(), i), false)
			if err != nil {
				return "", nil, fmt.Errorf("%s: %w", sh.name, err)
			}
			fmt.Fprintf(b.stdout, "%d events: raw %.0f ev/s (%.2fs, load %.1f), synchro %.0f ev/s (%.2fs, load %.1f), ratio %.3f; write floor %.0f ev/s (%s)\n",
				r.events, r.rawRate(), r.rawSec, r.rawLoad, r.synRate(), r.synSec, r.synLoad, r.synRate()/r.rawRate(), r.floorRate(), r.phases)
			results[sh.name] = append(results[sh.name], r)
		}
	}

	var sb strings.Builder
	synRates := make(map[string]float64)
	if decoder == "pgoutput" {
		sb.WriteString("### materialize: runner materialization rate vs raw decode of the same WAL\n\n")
	} else {
		fmt.Fprintf(&sb, "### materialize (--decoder %s): runner materialization rate vs raw pgoutput decode of the same WAL\n\n", decoder)
	}
	fmt.Fprintf(&sb, "Fast cluster: %s. Goal: synchro/raw ≥ %.1f for every shape.\n\n", fastSettings(ctx, conn), goalMaterialize)
	sb.WriteString("| source txns | txns | row events | raw decode ev/s | synchro ev/s | synchro/raw | goal | raw s | synchro s | WAL MB | load (raw/synchro, per run) |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|\n")
	below := false
	for _, sh := range shapes {
		runs := results[sh.name]
		var raws, syns, rawS, synS, loads []float64
		var loadTxt []string
		for _, r := range runs {
			raws = append(raws, r.rawRate())
			syns = append(syns, r.synRate())
			rawS = append(rawS, r.rawSec)
			synS = append(synS, r.synSec)
			loads = append(loads, r.rawLoad, r.synLoad)
			loadTxt = append(loadTxt, fmt.Sprintf("%.1f/%.1f", r.rawLoad, r.synLoad))
		}
		ratio := median(syns) / median(raws)
		synRates[sh.name] = median(syns)
		if decoder == "pgoutput" {
			b.record("materialize "+sh.name, ratio)
		} else {
			b.record("materialize "+decoder+" "+sh.name, ratio)
		}
		m := "PASS"
		if ratio < goalMaterialize {
			m, below = "BELOW-GOAL", true
		}
		fmt.Fprintf(&sb, "| %s | %d | %d | %.0f | %.0f | %.3f | %s | %.2f | %.2f | %.0f | %s |\n",
			sh.name, runs[0].txns, runs[0].events, median(raws), median(syns), ratio, m,
			median(rawS), median(synS), float64(runs[0].walBytes)/1e6, strings.Join(loadTxt, ", "))
	}
	sb.WriteString("\nCPU seconds per run (median run by synchro time): the raw decode's walsender and pg_recvlogical; " +
		"the runner's walsender, its apply backends (both apply sessions: COPY staging and `synchro.materialize_batch`, " +
		"or its two halves `materialize_prepare` and `materialize_write` for pipelined batches) and its Go code; " +
		"what the runner's walsender spilled to disk (transactions whose decoded changes passed logical_decoding_work_mem); " +
		"the WAL records of the source writes (all the raw decode reads) and those written while the runner ran (its walsender reads both):\n\n")
	sb.WriteString("| source txns | raw walsender | pg_recvlogical | synchro walsender | apply backend | runner (Go) | synchro wall s | spilled txns | spilled MB | source WAL records | runner's WAL records |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sh := range shapes {
		runs := results[sh.name]
		r := medianRun(runs)
		fmt.Fprintf(&sb, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %.1f | %d | %d |\n",
			sh.name, r.rawWalsenderCPU, r.rawClientCPU, r.synWalsenderCPU, r.synApplyCPU, r.synRunnerCPU, r.synSec,
			r.synSpillTxns, float64(r.synSpillBytes)/1e6, r.srcRecords, r.matRecords)
	}
	sb.WriteString("\nThe write floor: the same run's materialized rows (txn, event, effect, change, projection, " +
		"membership) inserted again into copies of those tables with their indexes and generated columns, one " +
		"set-based INSERT per table in one transaction, nothing decoded, staged or computed. floor/raw bounds any " +
		"materialization that writes these tables; synchro/floor is the share of that bound the runner reaches:\n\n")
	sb.WriteString("| source txns | raw decode ev/s | write floor ev/s | floor/raw | synchro ev/s | synchro/floor | floor by table (median run) |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, sh := range shapes {
		var raws, syns, floors []float64
		for _, r := range results[sh.name] {
			raws = append(raws, r.rawRate())
			syns = append(syns, r.synRate())
			floors = append(floors, r.floorRate())
		}
		fmt.Fprintf(&sb, "| %s | %.0f | %.0f | %.3f | %.0f | %.3f | %s |\n", sh.name, median(raws), median(floors),
			median(floors)/median(raws), median(syns), median(syns)/median(floors), medianRun(results[sh.name]).floorParts)
	}
	if below && !b.cfg.noProfile {
		fmt.Fprintln(b.stdout, "below goal: profile pass with pg_stat_statements (track=all) and track_functions=pl ...")
		prof, err := e.profile(ctx, shapes)
		if err != nil {
			return "", nil, fmt.Errorf("profile: %w", err)
		}
		sb.WriteString(prof)
	}
	return sb.String(), synRates, nil
}

func medianRun(runs []matRun) matRun {
	best, bestD := runs[0], -1.0
	var secs []float64
	for _, r := range runs {
		secs = append(secs, r.synSec)
	}
	m := median(secs)
	for _, r := range runs {
		d := r.synSec - m
		if d < 0 {
			d = -d
		}
		if bestD < 0 || d < bestD {
			best, bestD = r, d
		}
	}
	return best
}

func (e *matEnv) firstStart(ctx context.Context) error {
	r, err := startRunnerWith(ctx, e.b, e.url, e.dbname, e.decoder)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 2*time.Minute, 50*time.Millisecond, r.done, baselineDone(ctx, e.conn)); err != nil {
		_ = r.stop()
		return fmt.Errorf("baseline: %w", err)
	}
	return r.stop()
}

// measure makes one run: a raw slot created before the writes, the writes, the raw
// decode timed with pg_recvlogical, then the runner (stopped during the writes)
// started and timed until it materialized the last transaction.
func (e *matEnv) measure(ctx context.Context, sh matShape, rawSlot string, keepStats bool) (matRun, error) {
	var r matRun
	clock := newPhaseClock()
	if err := e.settle(ctx); err != nil {
		return r, err
	}
	clock.lap("settle")
	if _, err := e.conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, rawSlot); err != nil {
		return r, fmt.Errorf("create raw slot: %w", err)
	}
	defer func() { _, _ = e.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, rawSlot) }()
	start, err := walInsertLSN(ctx, e.conn)
	if err != nil {
		return r, err
	}

	// The writes: all but the last by pgbench; the last one here, after noting the WAL
	// position, so "materialized_commit_lsn > that position" means all are done.
	var maxID int64
	if sh.update {
		// Ids are 1..max(id): the suite inserts by identity and never deletes (the
		// count check below catches a missed row).
		if err := e.conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM public.items`).Scan(&maxID); err != nil {
			return r, err
		}
		if maxID < 1 {
			return r, fmt.Errorf("%s: no rows to update", sh.name)
		}
	}
	script, err := e.b.writeScript("mat_"+sh.key(), matScript(sh, maxID))
	if err != nil {
		return r, err
	}
	perClient := (sh.txns - 1) / sh.clients
	if perClient > 0 {
		if err := e.b.pgbenchTxns(ctx, e.cluster, e.dbname, script, sh.clients, perClient); err != nil {
			return r, err
		}
	}
	lastBefore, err := walInsertLSN(ctx, e.conn)
	if err != nil {
		return r, err
	}
	stmt := matScript(sh, maxID) // one statement when rows > 1
	switch {
	case sh.dep:
		stmt = "UPDATE public.teams SET member = 'u1' WHERE id = 1"
	case sh.update:
		stmt = "UPDATE public.items SET owner = 'o1', v = v + 1 WHERE id = 1"
	case sh.rows == 1:
		stmt = "INSERT INTO public.items (owner, v, payload) VALUES ('o1', 1, '" + payload64 + "')"
	}
	if _, err := e.conn.Exec(ctx, strings.TrimSuffix(strings.TrimSpace(stmt), ";")); err != nil {
		return r, fmt.Errorf("last write: %w", err)
	}
	endpos, err := walInsertLSN(ctx, e.conn)
	if err != nil {
		return r, err
	}
	// WAL past endpos that decodes to nothing (an unpublished table), so the raw
	// walsender reaches endpos and pg_recvlogical stops.
	if _, err := e.conn.Exec(ctx, `INSERT INTO public.bench_tick VALUES (1)`); err != nil {
		return r, err
	}
	if err := e.conn.QueryRow(ctx, `SELECT $1::pg_lsn - $2::pg_lsn`, endpos, start).Scan(&r.walBytes); err != nil {
		return r, err
	}
	r.txns = int64(perClient*sh.clients + 1)
	r.events = r.txns * int64(sh.rows)
	clock.lap("writes")
	if _, err := e.conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return r, err
	}
	clock.lap("checkpoint")

	// (a) raw decode.
	r.rawLoad = loadAvg()
	if err := e.rawDecode(ctx, rawSlot, endpos, &r); err != nil {
		return r, err
	}
	clock.lap("raw")

	// (b) the runner.
	if keepStats {
		if _, err := e.conn.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset()`); err != nil {
			return r, err
		}
	}
	r.synLoad = loadAvg()
	spillTxns0, spillBytes0, err := e.spill(ctx)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	run, err := startRunnerWith(ctx, e.b, e.url, e.dbname, e.decoder)
	if err != nil {
		return r, err
	}
	if err := waitFor(ctx, 30*time.Minute, 10*time.Millisecond, run.done, materializedPast(ctx, e.conn, lastBefore)); err != nil {
		_ = run.stop()
		return r, fmt.Errorf("runner: %w", err)
	}
	r.synSec = time.Since(t0).Seconds()
	r.synRunnerCPU = run.cpu()
	r.synWalsenderCPU, r.synApplyCPU = e.runnerBackendCPU(ctx)
	if err := run.stop(); err != nil {
		return r, fmt.Errorf("runner stop: %w", err)
	}
	spillTxns1, spillBytes1, err := e.spill(ctx)
	if err != nil {
		return r, err
	}
	r.synSpillTxns, r.synSpillBytes = spillTxns1-spillTxns0, spillBytes1-spillBytes0
	clock.lap("runner")
	// WAL records: a walsender reads every record of the cluster, one per turn of its
	// loop, and each turn polls the client's socket (a recv system call) whatever the
	// record decodes to, so the runner's walsender pays for the materialization's own
	// WAL records as for the source's.
	runEnd, err := walInsertLSN(ctx, e.conn)
	if err != nil {
		return r, err
	}
	r.srcRecords = e.walRecords(ctx, start, endpos)
	r.matRecords = e.walRecords(ctx, endpos, runEnd)
	clock.lap("waldump")

	// Check: every source transaction was materialized, with its row events.
	var txns, events int64
	if err := e.conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(event_count), 0) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`,
		start).Scan(&txns, &events); err != nil {
		return r, err
	}
	if txns != r.txns || events != r.events {
		return r, fmt.Errorf("materialized %d txns / %d events, wrote %d / %d", txns, events, r.txns, r.events)
	}
	clock.lap("check")
	if r.floorSec, r.floorParts, err = e.writeFloor(ctx, start); err != nil {
		return r, fmt.Errorf("write floor: %w", err)
	}
	clock.lap("floor")
	r.phases = clock.String()
	return r, nil
}

// floorTables are the permanent tables materialization writes for a row event of
// the suite's workload (one synced table, one direct scope rule: no rule_value, no
// write_fence coverage, which only pushes have), each with the key its rows of the
// run are found by.
var floorTables = []struct{ table, where string }{
	{"txn", "x.commit_lsn > $1::pg_lsn"},
	{"event", "x.commit_lsn > $1::pg_lsn"},
	{"effect", "x.commit_lsn > $1::pg_lsn"},
	{"change", "x.commit_lsn > $1::pg_lsn"},
	{"projection", "(x.relation_id, x.pk) IN (SELECT v.relation_id, v.pk FROM synchro.event v WHERE v.commit_lsn > $1::pg_lsn)"},
	{"membership", "(x.relation_id, x.pk) IN (SELECT v.relation_id, v.pk FROM synchro.event v WHERE v.commit_lsn > $1::pg_lsn)"},
}

// writeFloor times the write floor of a run: the rows materialization wrote for the
// run's transactions (copied into temporary tables of the floor database first,
// untimed) inserted again, in one transaction with one set-based INSERT per table,
// into copies of the permanent tables with their indexes, generated columns and
// defaults (LIKE … INCLUDING ALL), emptied first. Nothing is decoded, staged, paired
// or computed: it is what the run's materialized state costs to write at all, so
// floor/raw bounds any materialization that keeps these tables and their indexes,
// and synchro/floor is what the runner's own work costs on top.
//
// The floor is written on a cluster of its own (matEnv.floor). Written on the
// stream's cluster, as it was until 2026-12-02, it was WAL that the next run's
// runner read and the raw decode did not: a walsender reads every record of the
// cluster, whatever its database, and polls its client's socket (a recv system
// call) once per record. For the 1-row update run after the 1,000-row inserts, the
// last run's floor in the stream's database was one 76 MB transaction that the
// walsender decoded, spilled to disk and read back (7.8 s of its CPU in a 9.3 s
// run); moved to another database of the same cluster, its 700,000 records still
// cost the walsender about 4 s. Every run but the first was slowed.
func (e *matEnv) writeFloor(ctx context.Context, start string) (float64, string, error) {
	for _, t := range floorTables {
		sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS public.bench_floor_%[1]s (LIKE synchro.%[1]s INCLUDING ALL);
		  TRUNCATE public.bench_floor_%[1]s;
		  DROP TABLE IF EXISTS pg_temp.bench_src_%[1]s;
		  CREATE TEMP TABLE bench_src_%[1]s (LIKE synchro.%[1]s)`, t.table)
		if _, err := e.floor.Exec(ctx, sql); err != nil {
			return 0, "", err
		}
		// Text COPY from the stream's database into the floor's temporary table
		// (generated columns come along as plain values; the timed INSERT leaves
		// them out).
		var buf bytes.Buffer
		q := strings.Replace(fmt.Sprintf(`COPY (SELECT x.* FROM synchro.%s x WHERE %s) TO STDOUT`, t.table, t.where),
			"$1::pg_lsn", "'"+start+"'::pg_lsn", -1)
		if _, err := e.conn.PgConn().CopyTo(ctx, &buf, q); err != nil {
			return 0, "", fmt.Errorf("floor source %s: %w", t.table, err)
		}
		if _, err := e.floor.PgConn().CopyFrom(ctx, &buf, fmt.Sprintf(`COPY pg_temp.bench_src_%s FROM STDIN`, t.table)); err != nil {
			return 0, "", fmt.Errorf("floor copy %s: %w", t.table, err)
		}
	}
	if _, err := e.floor.Exec(ctx, `CHECKPOINT`); err != nil {
		return 0, "", err
	}
	var parts []string
	t0 := time.Now()
	tx, err := e.floor.Begin(ctx)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, t := range floorTables {
		// The copy's column list leaves generated columns out: they are computed again.
		var cols string
		if err := tx.QueryRow(ctx, `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
		  WHERE attrelid = ('synchro.' || $1)::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`,
			t.table).Scan(&cols); err != nil {
			return 0, "", err
		}
		t1 := time.Now()
		if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO public.bench_floor_%[1]s (%[2]s) SELECT %[2]s FROM pg_temp.bench_src_%[1]s`,
			t.table, cols)); err != nil {
			return 0, "", err
		}
		parts = append(parts, fmt.Sprintf("%s %.0f ms", t.table, time.Since(t1).Seconds()*1000))
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, "", err
	}
	return time.Since(t0).Seconds(), strings.Join(parts, ", "), nil
}

// settle brings the runner's slot to where a run starts: its restart_lsn at the end
// of the WAL. A logical slot resumes reading at its restart_lsn (the oldest WAL that
// decoding may still need), which moves only when the walsender decodes a snapshot of
// the running transactions and the client then confirms a position past it; stopped
// right after a run, the runner's slot kept it about one run back, so every run but
// the first read the last one's WAL again, source and materialization (1-row runs of
// a repeat took 1.3, 2.4 and 2.9 s), which the raw decode, on a new slot, never
// does. A checkpoint writes that snapshot; the runner, started without a backlog,
// decodes it and confirms past it within its idle interval (1 s); then it stops.
//
// The target is the end of the WAL before that checkpoint: the snapshot the checkpoint
// writes lies past it. The walsender keeps one candidate restart point at a time, and
// the last run's WAL holds snapshots the runner has not confirmed yet when it decodes
// the checkpoint's, so the wait logs another snapshot (a checkpoint) each second until
// the slot is there. Until 2026-12-05 it waited for the next snapshot the background
// writer logs on its own, every 15 s: 10-22 s of each run, three quarters of
// bench-quick.
func (e *matEnv) settle(ctx context.Context) error {
	target, err := walInsertLSN(ctx, e.conn)
	if err != nil {
		return err
	}
	if _, err := e.conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return err
	}
	lastCheckpoint := time.Now()
	run, err := startRunnerWith(ctx, e.b, e.url, e.dbname, e.decoder)
	if err != nil {
		return err
	}
	err = waitFor(ctx, 2*time.Minute, 20*time.Millisecond, run.done, func() (bool, error) {
		var ok bool
		err := e.conn.QueryRow(ctx, `SELECT coalesce(restart_lsn >= $2::pg_lsn, false) FROM pg_replication_slots
		  WHERE slot_name = $1`, e.dbname, target).Scan(&ok)
		if err == nil && !ok && time.Since(lastCheckpoint) > time.Second {
			// The walsender keeps one candidate restart point at a time, until the
			// client confirms past it: a snapshot decoded while the last run's is still
			// pending is dropped (LogicalIncreaseRestartDecodingForSlot). Log another.
			_, err = e.conn.Exec(ctx, `CHECKPOINT`)
			lastCheckpoint = time.Now()
		}
		return ok, err
	})
	if stopErr := run.stop(); err == nil && stopErr != nil {
		err = fmt.Errorf("runner stop: %w", stopErr)
	}
	if err != nil {
		return fmt.Errorf("settle the runner's slot: %w", err)
	}
	return nil
}

// walRecords counts the WAL records from one position to another (pg_waldump --stats;
// the segments are still there: no checkpoint ran since they were written). A
// diagnostic: -1 (printed as such) when it cannot count, never a failed run; the
// npm builds of PostgreSQL 16-18 have no pg_waldump.
func (e *matEnv) walRecords(ctx context.Context, from, to string) int64 {
	bin := filepath.Join(e.b.cfg.binDir, "pg_waldump")
	if _, err := os.Stat(bin); err != nil {
		return -1
	}
	// No further than the WAL flushed to its files: past it pg_waldump meets a page
	// not yet written ("invalid record length") and fails.
	if err := e.conn.QueryRow(ctx, `SELECT least($1::pg_lsn, pg_current_wal_flush_lsn())::text`, to).Scan(&to); err != nil {
		fmt.Fprintf(e.b.stdout, "(WAL records %s..%s not counted: %v) ", from, to, err)
		return -1
	}
	out, err := exec.CommandContext(ctx, bin, "--stats",
		"-p", filepath.Join(e.cluster.Dir(), "data", "pg_wal"), "-s", from, "-e", to).CombinedOutput()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "Total" {
				if n, perr := strconv.ParseInt(f[1], 10, 64); perr == nil {
					return n
				}
			}
		}
	}
	fmt.Fprintf(e.b.stdout, "(WAL records %s..%s not counted: pg_waldump: %v) ", from, to, err)
	return -1
}

// spill is what the walsenders of the stream's slots have spilled to disk so far
// (pg_stat_replication_slots; the raw decode's slot is dropped before the runner
// runs): the reorder buffer writes a decoded transaction out, and reads it back,
// once the changes it holds pass logical_decoding_work_mem.
func (e *matEnv) spill(ctx context.Context) (txns, bytes int64, err error) {
	err = e.conn.QueryRow(ctx, `SELECT coalesce(sum(s.spill_txns), 0)::bigint, coalesce(sum(s.spill_bytes), 0)::bigint
	  FROM pg_stat_replication_slots s JOIN pg_replication_slots r USING (slot_name)
	 WHERE r.database = current_database()`).Scan(&txns, &bytes)
	return txns, bytes, err
}

// runnerBackendCPU is the CPU time of the runner's walsender and apply backend.
func (e *matEnv) runnerBackendCPU(ctx context.Context) (walsender, apply float64) {
	rows, err := e.conn.Query(ctx, `SELECT pid, backend_type, coalesce(application_name, '') FROM pg_stat_activity
	  WHERE datname = current_database() AND (backend_type = 'walsender' OR application_name = 'synchro-runner-apply')`)
	if err != nil {
		return 0, 0
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var bt, app string
		if rows.Scan(&pid, &bt, &app) != nil {
			continue
		}
		if bt == "walsender" {
			walsender += cpuSeconds(pid)
		} else {
			apply += cpuSeconds(pid)
		}
	}
	return walsender, apply
}

// rawDecode times pg_recvlogical from its start to its exit at endpos, sampling its
// walsender's CPU time meanwhile.
func (e *matEnv) rawDecode(ctx context.Context, slot, endpos string, r *matRun) error {
	bin := filepath.Join(e.b.cfg.binDir, "pg_recvlogical")
	args := []string{
		"-d", e.url, "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names=synchro", "-o", "messages=true",
		"-f", "/dev/null", "--endpos", endpos,
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	var wsCPU atomic.Uint64 // milli-seconds
	stopSampler := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		pid := 0
		for {
			select {
			case <-stopSampler:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if pid == 0 {
				_ = e.conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE application_name = 'pg_recvlogical'`).Scan(&pid)
				continue
			}
			if c := cpuSeconds(pid); c > 0 {
				wsCPU.Store(uint64(c * 1000))
			}
		}
	}()
	t0 := time.Now()
	err := cmd.Run()
	r.rawSec = time.Since(t0).Seconds()
	close(stopSampler)
	<-sampled
	if err != nil {
		return fmt.Errorf("pg_recvlogical %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	r.rawWalsenderCPU = float64(wsCPU.Load()) / 1000
	if ps := cmd.ProcessState; ps != nil {
		r.rawClientCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	var confirmed string
	if err := e.conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err == nil {
		var ok bool
		if err := e.conn.QueryRow(ctx, `SELECT $1::pg_lsn >= $2::pg_lsn`, confirmed, endpos).Scan(&ok); err == nil && !ok {
			return fmt.Errorf("pg_recvlogical stopped at %s, before endpos %s", confirmed, endpos)
		}
	}
	return nil
}

// profile reruns each shape once with pg_stat_statements tracking nested statements and
// track_functions=pl, and reports where the runner's time went.
func (e *matEnv) profile(ctx context.Context, shapes []matShape) (string, error) {
	if err := trackStatements(ctx, e.conn, true, true); err != nil {
		return "", err
	}
	defer func() { _ = trackStatements(ctx, e.conn, false, true) }()
	// The harness's connection picks the settings up at its next command.
	var sb strings.Builder
	sb.WriteString("\n#### materialize profile\n\n")
	sb.WriteString("One extra run per shape with `pg_stat_statements.track = all` (statements inside PL/pgSQL counted " +
		"separately) and `track_functions = pl`; server execution time of the runner phase only (stats reset after the writes). " +
		"Tracking adds overhead, so the wall time here is above the timed runs'.\n")
	for _, sh := range shapes {
		fmt.Fprintf(e.b.stdout, "  profile %s ...\n", sh.name)
		logPath := filepath.Join(e.cluster.Dir(), "postgres.log")
		logStart := fileSize(logPath)
		r, err := e.measure(ctx, sh, fmt.Sprintf("bench_prof_%s", sh.key()), true)
		if err != nil {
			return "", err
		}
		plans := loggedPlans(logPath, logStart, []string{"WITH ev AS", "INSERT INTO synchro.membership", "INSERT INTO synchro.effect"})
		fmt.Fprintf(&sb, "\n**%s transactions** (%d txns, %d row events, runner wall %.2f s, %.0f ev/s, load %.1f; "+
			"CPU s: apply backend %.2f, walsender %.2f, runner Go %.2f):\n\n",
			sh.name, r.txns, r.events, r.synSec, r.synRate(), r.synLoad, r.synApplyCPU, r.synWalsenderCPU, r.synRunnerCPU)
		var top float64
		rows, err := e.conn.Query(ctx, `
		  SELECT toplevel, calls, total_exec_time, total_plan_time, regexp_replace(left(query, 400), '\s+', ' ', 'g')
		    FROM pg_stat_statements
		   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		   ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, e.b.cfg.profileRows+10)
		if err != nil {
			return "", err
		}
		type stmt struct {
			top   bool
			calls int64
			ms    float64
			plan  float64
			q     string
		}
		var stmts []stmt
		for rows.Next() {
			var s stmt
			if err := rows.Scan(&s.top, &s.calls, &s.ms, &s.plan, &s.q); err != nil {
				rows.Close()
				return "", err
			}
			stmts = append(stmts, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return "", err
		}
		if err := e.conn.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time + total_plan_time), 0) FROM pg_stat_statements
		   WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		     AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%materialized_commit_lsn >%'`).Scan(&top); err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "Top-level SQL of the runner: %.2f s of %.2f s wall (%.0f %%); the rest is outside SQL "+
			"(decoding wait, Go, round trips).\n\n", top/1000, r.synSec, 100*top/1000/r.synSec)
		var nestedPlan float64
		if err := e.conn.QueryRow(ctx, `SELECT coalesce(sum(total_plan_time), 0) FROM pg_stat_statements
		   WHERE NOT toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&nestedPlan); err != nil {
			return "", err
		}
		fmt.Fprintf(&sb, "Planning of statements inside the pack's functions: %.2f s (%.0f %% of wall).\n\n", nestedPlan/1000, 100*nestedPlan/1000/r.synSec)
		sb.WriteString("| level | calls | exec ms | plan ms | % of wall | µs/call | statement |\n|---|---:|---:|---:|---:|---:|---|\n")
		n := 0
		for _, s := range stmts {
			if strings.Contains(s.q, "pg_stat_statements") || strings.Contains(s.q, "materialized_commit_lsn >") {
				continue
			}
			lvl := "nested"
			if s.top {
				lvl = "top"
			}
			q := s.q
			if len(q) > 120 {
				q = q[:120] + "…"
			}
			q = strings.ReplaceAll(q, "|", "\\|")
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.1f | %.0f | `%s` |\n", lvl, s.calls, s.ms, s.plan, 100*(s.ms+s.plan)/1000/r.synSec,
				1000*(s.ms+s.plan)/float64(max(s.calls, 1)), q)
			n++
			if n == e.b.cfg.profileRows {
				break
			}
		}
		for _, p := range plans {
			sb.WriteString("\nPlan logged by auto_explain (first over 3 ms in this run; estimates only):\n\n```\n" + p + "\n```\n")
		}
		sb.WriteString("\nFunctions (`pg_stat_user_functions`, self time excludes the functions they call):\n\n")
		sb.WriteString("| function | calls | total ms | self ms |\n|---|---:|---:|---:|\n")
		frows, err := e.conn.Query(ctx, `SELECT schemaname || '.' || funcname, calls, total_time, self_time
		  FROM pg_stat_user_functions ORDER BY total_time DESC LIMIT $1`, max(10, e.b.cfg.profileRows))
		if err != nil {
			return "", err
		}
		for frows.Next() {
			var name string
			var calls int64
			var tot, self float64
			if err := frows.Scan(&name, &calls, &tot, &self); err != nil {
				frows.Close()
				return "", err
			}
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f |\n", name, calls, tot, self)
		}
		frows.Close()
	}
	return sb.String(), nil
}

// trackStatements turns pg_stat_statements' tracking of nested statements (and
// track_functions = pl) on or off for the cluster of conn; with plans, auto_explain
// also logs the plans of slow statements inside the functions. Sessions started
// after the reload see it (the runner's apply session); conn at its next command.
func trackStatements(ctx context.Context, conn *pgx.Conn, on, plans bool) error {
	qs := []string{`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		`ALTER SYSTEM SET pg_stat_statements.track = 'all'`, `ALTER SYSTEM SET track_functions = 'pl'`,
		`ALTER SYSTEM SET pg_stat_statements.track_planning = on`}
	if plans {
		qs = append(qs, `LOAD 'auto_explain'`, `ALTER SYSTEM SET session_preload_libraries = 'auto_explain'`,
			`ALTER SYSTEM SET auto_explain.log_min_duration = '3ms'`,
			`ALTER SYSTEM SET auto_explain.log_nested_statements = on`)
	}
	if !on {
		qs = []string{`ALTER SYSTEM RESET pg_stat_statements.track`, `ALTER SYSTEM RESET track_functions`,
			`ALTER SYSTEM RESET pg_stat_statements.track_planning`, `ALTER SYSTEM RESET session_preload_libraries`,
			`ALTER SYSTEM RESET auto_explain.log_min_duration`, `ALTER SYSTEM RESET auto_explain.log_nested_statements`}
	}
	qs = append(qs, `SELECT pg_reload_conf()`)
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	time.Sleep(200 * time.Millisecond) // the reload reaches the backends
	return nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// loggedPlans returns, for each marker, the first auto_explain plan logged after offset
// whose query text contains it (at most 40 lines each).
func loggedPlans(path string, offset int64, markers []string) []string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return nil
	}
	lines := strings.Split(string(b[offset:]), "\n")
	var entries [][]string
	for i := 0; i < len(lines); i++ {
		if !strings.Contains(lines[i], "LOG:  duration:") || !strings.Contains(lines[i], "plan:") {
			continue
		}
		e := []string{lines[i][strings.Index(lines[i], "duration:"):]}
		for i+1 < len(lines) && (strings.HasPrefix(lines[i+1], "\t") || strings.HasPrefix(lines[i+1], " ")) {
			i++
			e = append(e, strings.TrimRight(lines[i], " "))
		}
		entries = append(entries, e)
	}
	var out []string
	for _, m := range markers {
		for _, e := range entries {
			if strings.Contains(strings.Join(e, "\n"), m) {
				// Query Text is long: keep its first line only.
				var keep []string
				inText := false
				for _, l := range e {
					t := strings.TrimSpace(l)
					if strings.HasPrefix(t, "Query Text:") {
						keep = append(keep, "Query Text: "+firstN(strings.TrimSpace(strings.TrimPrefix(t, "Query Text:")), 100)+" …")
						inText = true
						continue
					}
					if inText && !strings.HasPrefix(t, "Insert") && !strings.HasPrefix(t, "Delete") && !strings.Contains(t, "->") &&
						!strings.HasPrefix(t, "Update") && !strings.HasPrefix(t, "Hash") && !strings.HasPrefix(t, "Nested") &&
						!strings.HasPrefix(t, "Merge") && !strings.HasPrefix(t, "Seq") && !strings.HasPrefix(t, "Index") {
						continue
					}
					inText = false
					keep = append(keep, l)
				}
				if len(keep) > 40 {
					keep = append(keep[:40], "…")
				}
				out = append(out, strings.Join(keep, "\n"))
				break
			}
		}
	}
	return out
}

func firstN(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner"
)

// fastConf is the configuration of the second cluster the materialize, memory and
// pull suites use: the test settings (fsync=off, full_page_writes=off) with
// synchronous_commit=on, as the issue allows for these suites: they measure the
// runner's and the read path's CPU work, not WAL flushes. pg_stat_statements is loaded
// but tracks nothing until a profile pass turns it on (ALTER SYSTEM + reload).
var fastConf = map[string]string{
	"synchronous_commit":               "on",
	"shared_buffers":                   "256MB",
	"max_wal_size":                     "8GB",
	"checkpoint_timeout":               "30min",
	"shared_preload_libraries":         "pg_stat_statements",
	"pg_stat_statements.track":         "none",
	"pg_stat_statements.max":           "5000",
	"pg_stat_statements.track_utility": "on",
	"track_functions":                  "none",
	// The lag suite reads the commit time of materialization transactions.
	"track_commit_timestamp": "on",
	// A server in steady state recycles its WAL segments; this fresh cluster has none
	// to recycle, so each new 16 MB segment was written full of zeros first, by
	// whichever backend crossed into it: 5 % of the runner's apply backend in a
	// 1,000-row run (perf, 2026-12-03, XLogFileInit), charged to no raw decode.
	"wal_init_zero": "off",
}

// fastCluster starts the fast cluster on first use.
func (b *bench) fastCluster(ctx context.Context) (*pgcluster.Cluster, error) {
	if b.fast != nil {
		return b.fast, nil
	}
	fmt.Fprintln(b.stdout, "starting a fast cluster (fsync=off, synchronous_commit=on) for the runner suites ...")
	c, err := b.startFastConf(ctx)
	if err != nil {
		return nil, err
	}
	b.fast = c
	if err := b.warmSharedBuffers(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

// warmSharedBuffers touches every page of the fast cluster's shared buffers once,
// as a server that has been running for a while has. On a fresh cluster the first use
// of each buffer faults its page in, and on a virtual machine whose host backs guest
// memory only when it is first touched (this one: 1.3 s per GiB the first time, 0.44
// s after: docs/benchmarks.md, "tenth session") that cost 8.6 % of the runner's apply
// backend in a 1,000-row run (perf, 2026-12-03: shmem_fault under ReadBuffer), charged
// to the runner, whose tables fill new buffers, and not to the raw decode. It reads a
// table as large as shared_buffers with pg_prewarm (a seq scan would go through a
// small ring of buffers), then drops it: the freed buffers stay faulted in. Skipped,
// and said so, where the server has no pg_prewarm.
func (b *bench) warmSharedBuffers(ctx context.Context, c *pgcluster.Cluster) error {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_prewarm"); err != nil {
		fmt.Fprintf(b.stdout, "shared buffers not warmed (no pg_prewarm: %v)\n", err)
		return nil
	}
	start := time.Now()
	var blocks int64
	err = conn.QueryRow(ctx, `
		WITH t AS (SELECT setting::bigint AS n FROM pg_settings WHERE name = 'shared_buffers')
		SELECT n FROM t`).Scan(&blocks)
	if err != nil {
		return err
	}
	// About 7 rows of 1,000 bytes fill an 8 kB page.
	for _, q := range []string{
		"DROP TABLE IF EXISTS synchro_bench_warm",
		fmt.Sprintf("CREATE TABLE synchro_bench_warm AS SELECT repeat('x', 1000) AS pad FROM generate_series(1, %d)", blocks*7),
		"SELECT pg_prewarm('synchro_bench_warm')",
		"DROP TABLE synchro_bench_warm",
		"DROP EXTENSION pg_prewarm",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("warm shared buffers: %w", err)
		}
	}
	fmt.Fprintf(b.stdout, "shared buffers warmed (%d pages, %.1fs)\n", blocks, time.Since(start).Seconds())
	return nil
}

// startFastConf starts a cluster with the fast settings.
func (b *bench) startFastConf(ctx context.Context) (*pgcluster.Cluster, error) {
	return pgcluster.Start(ctx, pgcluster.Options{BinDir: b.cfg.binDir, Logger: b.logger, ExtraConf: fastConf})
}

// floorCluster starts, on first use, the cluster with the fast one's settings where
// the materialize suite measures its write floor.
func (b *bench) floorCluster(ctx context.Context) (*pgcluster.Cluster, error) {
	if b.floor != nil {
		return b.floor, nil
	}
	c, err := b.startFastConf(ctx)
	if err != nil {
		return nil, err
	}
	b.floor = c
	if err := b.warmSharedBuffers(ctx, c); err != nil {
		return nil, err
	}
	return c, nil
}

func (b *bench) stopFast() {
	for _, c := range []**pgcluster.Cluster{&b.fast, &b.floor} {
		if *c != nil {
			if err := (*c).Stop(); err != nil {
				b.logger.Error("stop cluster", "err", err)
			}
			*c = nil
		}
	}
}

// fastSettings describes the fast cluster, for the reports.
func fastSettings(ctx context.Context, conn *pgx.Conn) string {
	var out []string
	for _, s := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "logical_decoding_work_mem", "work_mem"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v); err == nil {
			out = append(out, s+"="+v)
		}
	}
	return strings.Join(out, ", ")
}

// newFastDatabase creates a database on the fast cluster, installs Synchro and returns
// a connection and the database URL.
func (b *bench) newFastDatabase(ctx context.Context, name string) (*pgx.Conn, string, error) {
	c, err := b.fastCluster(ctx)
	if err != nil {
		return nil, "", err
	}
	return newDatabase(ctx, c, name)
}

// newDatabase creates a database on c, installs Synchro and returns a connection and
// the database URL.
func newDatabase(ctx context.Context, c *pgcluster.Cluster, name string) (*pgx.Conn, string, error) {
	admin, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return nil, "", err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	_ = admin.Close(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("create database %s: %w", name, err)
	}
	url := c.URL(name)
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, "", err
	}
	err = synchro.Install(ctx, db)
	_ = db.Close()
	if err != nil {
		return nil, "", err
	}
	conn, err := pgx.Connect(ctx, url)
	return conn, url, err
}

// itemsTable is the registered table of the runner suites: one direct scope rule,
// owner → 'owner:<owner>'.
const itemsTable = `
CREATE TABLE public.items (
  id      bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  owner   text NOT NULL,
  v       int  NOT NULL,
  payload text NOT NULL
);`

const registerItems = `
SELECT synchro.register_table('public.items', 'items');
SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
SELECT synchro.activate_registry();`

// payload64 is the 64-byte text every benchmark row carries.
const payload64 = "synchro-bench-payload-0123456789abcdef0123456789abcdef0123456789"

// benchRunner is a runner a suite starts and stops: by default `synchro run` as a
// child process, the product as deployed (its own GOMAXPROCS, runner.DefaultProcs; this
// process's goroutines, Go writers and garbage apart from it); in this process with
// --cpuprofile, so that the profile holds the runner.
type benchRunner struct {
	done chan error     // receives the runner's exit
	stop func() error   // a clean stop, waited for
	cpu  func() float64 // CPU seconds (user + system) the runner used since its start
}

// Replication slots are cluster-wide, so each suite's runner uses its own slot, named
// after its database.
func startRunner(ctx context.Context, b *bench, url, slot string) (*benchRunner, error) {
	return startRunnerWith(ctx, b, url, slot, "")
}

// startRunnerWith starts a runner decoding with decoder ("" is pgoutput).
func startRunnerWith(ctx context.Context, b *bench, url, slot, decoder string) (*benchRunner, error) {
	if b.cfg.cpuProfile == "" {
		bin, err := b.synchroBinary(ctx)
		if err != nil {
			return nil, err
		}
		args := []string{}
		if decoder != "" {
			args = append(args, "--decoder", decoder)
		}
		sub, err := startSubRunner(bin, url, slot, args...)
		if err != nil {
			return nil, err
		}
		pid := sub.cmd.Process.Pid
		return &benchRunner{done: sub.done, stop: sub.stop, cpu: func() float64 { return procCPU(pid) }}, nil
	}
	r, err := runner.New(runner.Config{DatabaseURL: url, Slot: slot, Decoder: decoder, Logger: b.logger, Owner: "synchro-bench"})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	cpu0 := selfCPU()
	p := &benchRunner{done: make(chan error, 1), cpu: func() float64 { return selfCPU() - cpu0 }}
	p.stop = func() error {
		cancel()
		return <-p.done
	}
	go func() { p.done <- r.Run(rctx) }()
	return p, nil
}

// synchroBinary builds ./cmd/synchro once per benchmark run (or takes --synchro-bin).
func (b *bench) synchroBinary(ctx context.Context) (string, error) {
	if b.synchroBin == "" {
		if b.cfg.synchroBin == "" {
			fmt.Fprintln(b.stdout, "building ./cmd/synchro (the suites run `synchro run` as a child process) ...")
		}
		bin, err := b.buildSynchro(ctx, b.scriptDir)
		if err != nil {
			return "", err
		}
		b.synchroBin = bin
	}
	return b.synchroBin, nil
}

// procCPU is a process's user + system CPU seconds so far (/proc/<pid>/stat), 0 once
// it is gone.
func procCPU(pid int) float64 {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces), from its closing ")":
	// state is field 3, utime 14 and stime 15 (proc(5)).
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return (ut + st) / clockTicks
}

// clockTicks is sysconf(_SC_CLK_TCK), 100 on every Linux this runs on (USER_HZ).
const clockTicks = 100

// waitFor polls cond every interval until it is true, the runner (when given) exits, or
// the timeout passes.
func waitFor(ctx context.Context, timeout, interval time.Duration, done <-chan error, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("the runner exited: %v", err)
		case <-time.After(interval):
		}
	}
}

// baselineDone reports whether the runner's first start created the stream.
func baselineDone(ctx context.Context, conn *pgx.Conn) func() (bool, error) {
	return func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM synchro.progress)`).Scan(&ok)
		return ok, err
	}
}

// materializedPast reports whether synchro.progress has materialized a commit above lsn.
func materializedPast(ctx context.Context, conn *pgx.Conn, lsn string) func() (bool, error) {
	return func() (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx,
			`SELECT coalesce(materialized_commit_lsn > $1::pg_lsn, false) FROM synchro.progress`, lsn).Scan(&ok)
		return ok, err
	}
}

func walInsertLSN(ctx context.Context, conn *pgx.Conn) (string, error) {
	var lsn string
	err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	return lsn, err
}

// pgbenchTxns runs a pgbench script for a fixed number of transactions per client
// against a database of the fast cluster.
func (b *bench) pgbenchTxns(ctx context.Context, c *pgcluster.Cluster, dbname, script string, clients, perClient int) error {
	args := []string{
		"-n", "-M", "prepared", "-t", strconv.Itoa(perClient),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.Port()), "-U", "postgres",
		"-f", script, dbname,
	}
	cmd := exec.CommandContext(ctx, b.cfg.pgbench, args...)
	cmd.Env = append(os.Environ(), "PGSSLMODE=disable", "PGAPPNAME=synchro-bench")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	if _, _, err := parsePgbench(string(out)); err != nil {
		return fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	return nil
}

// cpuSeconds is utime+stime of a process from /proc/<pid>/stat (0 when unreadable).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// selfCPU is this process's user+system CPU time.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtLoads(ls []float64) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = strconv.FormatFloat(l, 'f', 1, 64)
	}
	return strings.Join(parts, "/")
}

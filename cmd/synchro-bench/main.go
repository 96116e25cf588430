// Command synchro-bench measures what Synchro costs the application's writes, on a
// private durable PostgreSQL cluster it starts and removes itself, and what the runner
// and the read path deliver (materialize, memory, pull), on a second private cluster
// with the fast test settings (fast.go).
//
//	go run ./cmd/synchro-bench [--suite write] [--duration 10s] [--clients 1,8,32] [--out FILE]
//
// Each suite (write, fence-profile, ...) lives in its own file and registers itself in
// suites (suite.go). The write-path cluster always runs with durable settings (fsync=on,
// synchronous_commit=on, full_page_writes=on): the fast test settings would hide the
// cost of WAL flushes and of serialized commits. The runner suites measure CPU work and
// use the fast cluster instead. docs/benchmarks.md describes the
// method and the latest figures.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner"
)

// clusterConf is the benchmark cluster's configuration on top of pgcluster's defaults
// (wal_level=logical, synchronous_commit=on). Durable=true keeps fsync and
// full_page_writes on; synchronous_commit is repeated here so the benchmark does not
// depend on that default. Checkpoints are spaced out so none lands inside a run: the
// harness checkpoints explicitly between runs instead.
var clusterConf = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"shared_buffers":     "256MB",
	"max_connections":    "200",
	"max_wal_size":       "8GB",
	"checkpoint_timeout": "30min",
	// Autovacuum stays on (the default), as in production.
}

// reportedSettings are read back from the running server and printed with the results.
var reportedSettings = []string{
	"server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level",
	"wal_sync_method", "shared_buffers", "max_connections", "max_wal_size",
	"checkpoint_timeout", "autovacuum",
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(ctx, os.Args[1:], os.Stdout, logger); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "synchro-bench:", err)
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	duration time.Duration
	clients  []int
	suites   []string
	repeat   int
	keep     bool
	out      string
	pgbench  string
	binDir   string

	// materialize, memory and pull suites (fast.go, materialize.go, memory.go, pull.go)
	matSmallTxns int      // 1-row source transactions per materialize run
	matBigTxns   int      // 1,000-row source transactions per materialize run
	matDepTxns   int      // dependency-change source transactions per materialize run (0: no such shape)
	matDecoders  []string // decoders the materialize suite runs the runner with (--decoder)
	memRows      int      // rows of the memory suite's one source transaction
	memTimeout   time.Duration
	synchroBin   string // prebuilt synchro binary for the memory suite (default: go build ./cmd/synchro)
	pullEffects  int    // total effects of the pull suite's large stream
	groupsTxns   int    // backlog of the groups suite (groups.go)
	ledgerRows   int    // events in each ledger of the ledger suite (ledger.go)

	cpuProfile  string // write a Go CPU profile of the whole run (the in-process runners included)
	noProfile   bool   // skip the materialize suite's pg_stat_statements profile pass
	profileRows int    // statements and functions the profile pass lists
	check       string // compare recorded ratios with the summary table of this markdown file

	// lag suite (lag.go)
	lagRate       int
	lagDuration   time.Duration
	lagProfile    bool // lag: one more steady run with nested statements tracked, per batch
	headroomRates []int
	headroomStep  time.Duration

	procs        int  // GOMAXPROCS of this process (runner.ApplyProcs)
	procsFromEnv bool // set by the GOMAXPROCS environment variable, not the runner's default
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("synchro-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	clients := fs.String("clients", "1,8,32", "comma-separated pgbench client counts")
	suiteList := fs.String("suite", "write", "comma-separated suites: "+strings.Join(suiteNames(), ", "))
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "length of each pgbench run (whole seconds)")
	fs.IntVar(&c.repeat, "repeat", 1, "runs per measurement; the median tps is reported")
	fs.BoolVar(&c.keep, "keep", false, "keep the cluster directory (its path is printed)")
	fs.StringVar(&c.out, "out", "", "also write the results as markdown to this file")
	fs.IntVar(&c.matSmallTxns, "mat-small-txns", 2000, "materialize: 1-row source transactions per run (~12 ms each today)")
	fs.IntVar(&c.matBigTxns, "mat-big-txns", 50, "materialize: 1,000-row source transactions per run")
	fs.IntVar(&c.matDepTxns, "mat-dep-txns", 1000, "materialize: source transactions of the dependency shape per run, each moving "+
		"the 10 synced rows one dependency row reaches to another scope (0: the shape, and its tables, are left out)")
	fs.IntVar(&c.memRows, "mem-rows", 1_000_000, "memory: rows in the one source transaction")
	fs.DurationVar(&c.memTimeout, "mem-timeout", 15*time.Minute, "memory: give up waiting for materialization after this long")
	fs.StringVar(&c.synchroBin, "synchro-bin", "", "memory: synchro binary to run (default: go build ./cmd/synchro)")
	fs.IntVar(&c.pullEffects, "pull-effects", 10_000_000, "pull: total effects in the large stream")
	decoders := fs.String("decoder", "pgoutput,wal2json", "materialize: comma-separated decoders the runner runs with (pgoutput, wal2json); "+
		"with several, each gets a stream of its own and the section compares their rates (a wal2json the server lacks is skipped, said so)")
	fs.IntVar(&c.ledgerRows, "ledger-rows", 2_000_000, "ledger: events already in each ledger before the measured inserts")
	fs.IntVar(&c.groupsTxns, "groups-txns", 10_000, "groups: single-row source transactions in the backlog (the issue's figure: 100000)")
	fs.BoolVar(&c.noProfile, "no-profile", false, "materialize: skip the profile pass that runs when a ratio is below its goal")
	fs.IntVar(&c.profileRows, "profile-rows", 18, "materialize: statements (and functions) the profile pass lists per shape")
	fs.StringVar(&c.check, "check", "", "fail when a same-run ratio falls below half of the figure in this file's summary table (docs/benchmarks.md)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the run (in-process runners included) to this file")
	fs.IntVar(&c.lagRate, "lag-rate", 1000, "lag: steady single-row transactions per second")
	fs.DurationVar(&c.lagDuration, "lag-duration", 60*time.Second, "lag: length of the steady load")
	fs.BoolVar(&c.lagProfile, "lag-profile", false, "lag: one more steady run at --lag-rate with pg_stat_statements tracking nested statements: what one materialization batch costs, statement by statement")
	headroom := fs.String("headroom-rates", "1000,2000,4000,8000", "lag: comma-separated ladder of steady rates (tps) for the headroom")
	fs.DurationVar(&c.headroomStep, "headroom-step", 60*time.Second, "lag: length of each headroom rate")
	fs.StringVar(&c.binDir, "pg-bin", "", "PostgreSQL server binaries (default $SYNCHRO_PG_BIN, else "+pgcluster.DefaultBinDir+")")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro-bench [flags]")
		fmt.Fprintln(fs.Output(), "Starts a private durable PostgreSQL cluster (and a fast one for the runner suites), runs the benchmark suites and prints the results.")
		fmt.Fprintln(fs.Output(), "Suites:")
		for _, n := range suiteNames() {
			fmt.Fprintf(fs.Output(), "  %-14s %s\n", n, suites[n].summary)
		}
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, r := range strings.Split(*headroom, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-headroom-rates: %q is not a positive rate", r)
		}
		c.headroomRates = append(c.headroomRates, n)
	}
	if c.duration < time.Second {
		return nil, fmt.Errorf("--duration must be at least 1s")
	}
	if c.repeat < 1 {
		return nil, fmt.Errorf("--repeat must be at least 1")
	}
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--clients: bad client count %q", f)
		}
		c.clients = append(c.clients, n)
	}
	for _, s := range strings.Split(*suiteList, ",") {
		s = strings.TrimSpace(s)
		if _, ok := suites[s]; !ok {
			return nil, fmt.Errorf("--suite: unknown suite %q (have %s)", s, strings.Join(suiteNames(), ", "))
		}
		c.suites = append(c.suites, s)
	}
	for _, d := range strings.Split(*decoders, ",") {
		d = strings.TrimSpace(d)
		if _, err := runner.PluginFor(d); err != nil || d == "pglogical" {
			return nil, fmt.Errorf("--decoder: %q: want pgoutput or wal2json", d)
		}
		c.matDecoders = append(c.matDecoders, d)
	}
	if c.binDir == "" {
		c.binDir = os.Getenv("SYNCHRO_PG_BIN")
	}
	if c.binDir == "" {
		c.binDir = pgcluster.DefaultBinDir
	}
	c.pgbench = filepath.Join(c.binDir, "pgbench")
	if _, err := os.Stat(c.pgbench); err != nil {
		return nil, fmt.Errorf("pgbench not found: %w", err)
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout io.Writer, logger *slog.Logger) error {
	cfg, err := parseFlags(args, os.Stderr)
	if err != nil {
		return err
	}
	if cfg.cpuProfile != "" {
		// The runners run in this process (benchRunner): measured with `synchro run`'s
		// GOMAXPROCS (runner.DefaultProcs says why), unless the environment sets one.
		cfg.procs, cfg.procsFromEnv = runner.ApplyProcs(os.Getenv)
	} else {
		cfg.procs = runtime.GOMAXPROCS(0)
	}

	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	// Our own directory (under $TMPDIR, which the postgres OS user can traverse when we
	// run as root), so --keep can leave it behind.
	dir, err := os.MkdirTemp("", "synchro-bench-")
	if err != nil {
		return err
	}
	if cfg.keep {
		defer fmt.Fprintf(stdout, "\ncluster directory kept: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	scripts, err := os.MkdirTemp("", "synchro-bench-scripts-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scripts)

	fmt.Fprintf(stdout, "starting a durable benchmark cluster in %s ...\n", dir)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir:       dir,
		Durable:   true,
		BinDir:    cfg.binDir,
		Logger:    logger,
		ExtraConf: clusterConf,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			logger.Error("stop cluster", "err", err)
		}
	}()

	b := &bench{cfg: cfg, cluster: cluster, scriptDir: scripts, stdout: stdout, logger: logger}
	defer b.stopFast()
	header, err := b.describe(ctx)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, header)

	var md strings.Builder
	md.WriteString(header)
	for _, name := range cfg.suites {
		fmt.Fprintf(stdout, "\n== suite %s: %s\n", name, suites[name].summary)
		section, err := suites[name].run(ctx, b)
		if err != nil {
			return fmt.Errorf("suite %s: %w", name, err)
		}
		fmt.Fprint(stdout, "\n"+section)
		md.WriteString("\n" + section)
	}
	if cfg.out != "" {
		if err := os.WriteFile(cfg.out, []byte(md.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", cfg.out)
	}
	if cfg.check != "" {
		return checkRatios(cfg.check, b.ratios, stdout)
	}
	return nil
}

// bench is what every suite gets: the cluster, the configuration and helpers.
type bench struct {
	cfg       *config
	cluster   *pgcluster.Cluster
	scriptDir string
	stdout    io.Writer
	logger    *slog.Logger
	// fast is the second cluster with test settings (fsync off) for the suites that
	// measure the runner and the read path, started on first use (fast.go).
	fast *pgcluster.Cluster
	// floor is a third cluster, with the fast one's settings, where the materialize
	// suite writes its write floor (materialize.go says why not on the fast one).
	floor *pgcluster.Cluster
	// synchroBin is the `synchro` binary the suites run as child processes, built on
	// first use (synchroBinary).
	synchroBin string
	// ratios are the same-run ratios the suites measured, by metric name (the first
	// column of the summary table in docs/benchmarks.md), for --check.
	ratios map[string]float64
}

// record keeps a same-run ratio for --check.
func (b *bench) record(metric string, ratio float64) {
	if b.ratios == nil {
		b.ratios = map[string]float64{}
	}
	b.ratios[metric] = ratio
}

// newDatabase creates an empty database, installs Synchro into it and returns a pgx
// connection to it (for setup and between-run maintenance).
func (b *bench) newDatabase(ctx context.Context, name string) (*pgx.Conn, error) {
	admin, err := pgx.Connect(ctx, b.cluster.URL("postgres"))
	if err != nil {
		return nil, err
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	_ = admin.Close(ctx)
	if err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	db, err := sql.Open("pgx", b.cluster.URL(name))
	if err != nil {
		return nil, err
	}
	err = synchro.Install(ctx, db)
	_ = db.Close()
	if err != nil {
		return nil, err
	}
	return pgx.Connect(ctx, b.cluster.URL(name))
}

// describe returns the machine facts and server settings, as markdown.
func (b *bench) describe(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, b.cluster.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var sb strings.Builder
	fmt.Fprintf(&sb, "## Run %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&sb, "- machine: %d CPUs (%s), %s RAM, %s, kernel %s\n",
		runtime.NumCPU(), cpuModel(), memTotal(), runtime.GOARCH, kernel())
	fmt.Fprintf(&sb, "- cluster directory filesystem: %s\n", fsType(b.cluster.Dir()))
	if b.cfg.cpuProfile == "" {
		fmt.Fprintf(&sb, "- runners: `synchro run` child processes (GOMAXPROCS %s); this process (Go writers, pollers): GOMAXPROCS %d\n",
			childProcs(), b.cfg.procs)
	} else {
		procsFrom := "synchro run's default"
		if b.cfg.procsFromEnv {
			procsFrom = "from the environment"
		}
		fmt.Fprintf(&sb, "- runners: in this process for --cpuprofile, GOMAXPROCS %d (%s), shared with its Go writers and pollers\n",
			b.cfg.procs, procsFrom)
	}
	var pgbenchVersion string
	if out, err := exec.CommandContext(ctx, b.cfg.pgbench, "--version").Output(); err == nil {
		pgbenchVersion = strings.TrimSpace(string(out))
	}
	fmt.Fprintf(&sb, "- load generator: %s on the same machine, `-n -M prepared -T %d -j min(clients,2)`, TCP to 127.0.0.1\n",
		pgbenchVersion, pgbenchSeconds(b.cfg.duration))
	fmt.Fprintf(&sb, "- runs per measurement: %d (median tps)\n", b.cfg.repeat)
	var settings []string
	for _, s := range reportedSettings {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v); err != nil {
			return "", err
		}
		settings = append(settings, s+"="+v)
	}
	fmt.Fprintf(&sb, "- settings: %s\n", strings.Join(settings, ", "))
	return sb.String(), nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return fmt.Sprintf("%.0f GiB", kb/1024/1024)
		}
	}
	return "unknown"
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// fsType names the filesystem holding dir, from /proc/self/mounts (longest prefix).
func fsType(dir string) string {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "unknown"
	}
	best, bestType, bestDev := -1, "unknown", ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		mp := f[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > best {
			best, bestType, bestDev = len(mp), f[2], f[0]
		}
	}
	return bestType + " on " + bestDev
}

func suiteNames() []string {
	names := make([]string, 0, len(suites))
	for n := range suites {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// childProcs describes the GOMAXPROCS of `synchro run` children: the environment's
// (they inherit it) or the runner's default.
func childProcs() string {
	if n, ok := runner.EnvProcs(os.Getenv); ok {
		return strconv.Itoa(n) + ", from the environment"
	}
	return strconv.Itoa(runner.DefaultProcs) + ", synchro run's default"
}

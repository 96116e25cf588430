package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// result is one measurement: the median of --repeat pgbench runs.
type result struct {
	tps       float64 // transactions per second, without initial connection time
	latencyMs float64 // average latency of the median run
	walPerTx  float64 // WAL bytes written per transaction (whole server, median run)
	load      float64 // 1-minute load average before the median run: other work on the machine
}

// loadAvg is the 1-minute load average (0 where /proc is missing).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// pgbenchSeconds is the -T value: pgbench takes whole seconds.
func pgbenchSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}

// writeScript stores a pgbench custom script and returns its path.
func (b *bench) writeScript(name, body string) (string, error) {
	p := filepath.Join(b.scriptDir, name+".sql")
	return p, os.WriteFile(p, []byte(body), 0o644)
}

// measure runs the script --repeat times with this many clients against dbname, calling
// prepare before each run (VACUUM, CHECKPOINT), and returns the median run by tps.
func (b *bench) measure(ctx context.Context, conn *pgx.Conn, dbname, script string, clients int, prepare func() error) (result, error) {
	var runs []result
	for i := 0; i < b.cfg.repeat; i++ {
		if err := prepare(); err != nil {
			return result{}, err
		}
		load := loadAvg()
		var before, after int64
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&before); err != nil {
			return result{}, err
		}
		out, err := b.pgbench(ctx, dbname, script, clients)
		if err != nil {
			return result{}, err
		}
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&after); err != nil {
			return result{}, err
		}
		r, txns, err := parsePgbench(out)
		if err != nil {
			return result{}, fmt.Errorf("%s with %d clients: %w\n%s", filepath.Base(script), clients, err, out)
		}
		r.load = load
		if txns > 0 {
			r.walPerTx = float64(after-before) / float64(txns)
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].tps < runs[j].tps })
	return runs[len(runs)/2], nil
}

// pgbench runs one pgbench process and returns its combined output.
func (b *bench) pgbench(ctx context.Context, dbname, script string, clients int) (string, error) {
	jobs := min(clients, 2)
	args := []string{
		"-n", "-M", "prepared",
		"-T", strconv.Itoa(pgbenchSeconds(b.cfg.duration)),
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(jobs),
		"-h", "127.0.0.1", "-p", strconv.Itoa(b.cluster.Port()), "-U", "postgres",
		"-f", script, dbname,
	}
	cmd := exec.CommandContext(ctx, b.cfg.pgbench, args...)
	cmd.Env = append(os.Environ(), "PGSSLMODE=disable", "PGAPPNAME=synchro-bench")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

var (
	reTPS       = regexp.MustCompile(`(?m)^tps = ([0-9.]+) \(without initial connection time\)`)
	reTxns      = regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	reFailed    = regexp.MustCompile(`(?m)^number of failed transactions: ([0-9]+)`)
	reLatency   = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
	reAbortedCl = regexp.MustCompile(`(?m)aborted in command|client [0-9]+ aborted`)
)

// parsePgbench reads tps, average latency and the transaction count from pgbench's
// summary. A run with failed transactions or aborted clients is an error: its tps
// would not measure the intended workload.
func parsePgbench(out string) (result, int64, error) {
	if reAbortedCl.MatchString(out) {
		return result{}, 0, fmt.Errorf("a pgbench client aborted")
	}
	if m := reFailed.FindStringSubmatch(out); m != nil && m[1] != "0" {
		return result{}, 0, fmt.Errorf("%s failed transactions", m[1])
	}
	m := reTPS.FindStringSubmatch(out)
	if m == nil {
		return result{}, 0, fmt.Errorf("no tps line in pgbench output")
	}
	tps, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return result{}, 0, err
	}
	var r result
	r.tps = tps
	if m := reLatency.FindStringSubmatch(out); m != nil {
		r.latencyMs, _ = strconv.ParseFloat(m[1], 64)
	}
	var txns int64
	if m := reTxns.FindStringSubmatch(out); m != nil {
		txns, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return r, txns, nil
}

// maintain vacuums the given tables and checkpoints, so every run starts from the
// same state: no dead tuples left by the previous run, no dirty buffers to flush.
func maintain(ctx context.Context, conn *pgx.Conn, tables []string) error {
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "VACUUM "+t); err != nil {
			return fmt.Errorf("vacuum %s: %w", t, err)
		}
	}
	_, err := conn.Exec(ctx, "CHECKPOINT")
	return err
}

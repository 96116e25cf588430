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
	"sync"
	"syscall"
	"time"
)

// The memory suite: one source transaction of --mem-rows rows (1,000,000) is
// materialized by `synchro run` as a subprocess, whose peak RSS (VmHWM) must stay under
// 256 MB.
func init() {
	registerSuite("memory", suite{
		summary: "peak RSS of `synchro run` (subprocess) materializing one 1,000,000-row source transaction",
		run:     runMemory,
	})
}

const memLimitMB = 256

// buildSynchro builds ./cmd/synchro into dir unless --synchro-bin names one.
func (b *bench) buildSynchro(ctx context.Context, dir string) (string, error) {
	if b.cfg.synchroBin != "" {
		return b.cfg.synchroBin, nil
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "synchro")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/synchro")
	cmd.Dir = root
	if o, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/synchro: %w\n%s", err, o)
	}
	return bin, nil
}

// procStatusKB reads a "Vm...:  N kB" field of /proc/<pid>/status.
func procStatusKB(pid int, field string) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return -1
}

// subRunner is `synchro run` as a child process with an RSS sampler.
type subRunner struct {
	cmd     *exec.Cmd
	out     bytes.Buffer
	done    chan error
	mu      sync.Mutex
	hwmKB   int64
	rssKB   int64
	stopped chan struct{}
}

// startSubRunner starts `synchro run` with extra flags; it listens on a port of its
// own choosing (port 0).
func startSubRunner(bin, url, slot string, extra ...string) (*subRunner, error) {
	s := &subRunner{done: make(chan error, 1), stopped: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"run", "--database-url", url, "--slot", slot, "--listen", "127.0.0.1:0"},
		extra...)...)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	pid := s.cmd.Process.Pid
	go func() { s.done <- s.cmd.Wait() }()
	go func() {
		for {
			h, r := procStatusKB(pid, "VmHWM"), procStatusKB(pid, "VmRSS")
			s.mu.Lock()
			if h > s.hwmKB {
				s.hwmKB = h
			}
			if r > 0 {
				s.rssKB = r
			}
			s.mu.Unlock()
			select {
			case <-s.stopped:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return s, nil
}

func (s *subRunner) peakMB() (hwm, rss float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.hwmKB) / 1024, float64(s.rssKB) / 1024
}

// stop sends SIGTERM (a clean stop) and waits.
func (s *subRunner) stop() error {
	defer close(s.stopped)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			return fmt.Errorf("synchro run: %w\n%s", err, tailString(s.out.String(), 20))
		}
		return nil
	case <-time.After(2 * time.Minute):
		_ = s.cmd.Process.Kill()
		return fmt.Errorf("synchro run did not stop in 2 minutes")
	}
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func runMemory(ctx context.Context, b *bench) (string, error) {
	bin, err := b.synchroBinary(ctx)
	if err != nil {
		return "", err
	}
	const dbname = "bench_memory"
	conn, url, err := b.newFastDatabase(ctx, dbname)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, itemsTable+registerItems); err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	fmt.Fprintln(b.stdout, "first `synchro run` (slot + baseline) ...")
	sub, err := startSubRunner(bin, url, dbname)
	if err != nil {
		return "", err
	}
	if err := waitFor(ctx, 2*time.Minute, 50*time.Millisecond, sub.done, baselineDone(ctx, conn)); err != nil {
		_ = sub.stop()
		return "", fmt.Errorf("baseline: %w\n%s", err, tailString(sub.out.String(), 20))
	}
	time.Sleep(time.Second) // streaming, idle
	idleHWM, idleRSS := sub.peakMB()
	if err := sub.stop(); err != nil {
		return "", err
	}

	n := b.cfg.memRows
	fmt.Fprintf(b.stdout, "one source transaction of %d rows (runner stopped) ...\n", n)
	before, err := walInsertLSN(ctx, conn)
	if err != nil {
		return "", err
	}
	writeLoad := loadAvg()
	t0 := time.Now()
	if _, err := conn.Exec(ctx, fmt.Sprintf(
		`INSERT INTO public.items (owner, v, payload) SELECT 'o' || (g %% 100), g, '%s' FROM generate_series(1, %d) g`,
		payload64, n)); err != nil {
		return "", err
	}
	writeSec := time.Since(t0).Seconds()
	var walBytes int64
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - $1::pg_lsn`, before).Scan(&walBytes); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return "", err
	}

	fmt.Fprintln(b.stdout, "`synchro run` materializing it, sampling VmHWM every 50 ms ...")
	load := loadAvg()
	t0 = time.Now()
	sub, err = startSubRunner(bin, url, dbname)
	if err != nil {
		return "", err
	}
	werr := waitFor(ctx, b.cfg.memTimeout, 200*time.Millisecond, sub.done, materializedPast(ctx, conn, before))
	matSec := time.Since(t0).Seconds()
	hwm, rss := sub.peakMB()
	loadEnd := loadAvg()
	serr := sub.stop()
	if werr != nil {
		return "", fmt.Errorf("materialization of %d rows: %w (peak RSS so far %.0f MB)\n%s", n, werr, hwm, tailString(sub.out.String(), 20))
	}
	if serr != nil {
		return "", serr
	}
	var events int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(event_count), 0) FROM synchro.txn WHERE commit_lsn > $1::pg_lsn`, before).Scan(&events); err != nil {
		return "", err
	}
	if events != int64(n) {
		return "", fmt.Errorf("materialized %d row events, wrote %d", events, n)
	}
	verdict := "PASS"
	if hwm >= memLimitMB {
		verdict = "FAIL"
	}
	fmt.Fprintf(b.stdout, "  %d rows: peak RSS %.0f MB (%s), materialized in %.1f s (%.0f rows/s), load %.1f→%.1f\n",
		n, hwm, verdict, matSec, float64(n)/matSec, load, loadEnd)

	var sb strings.Builder
	sb.WriteString("### memory: peak RSS of `synchro run` on one large source transaction\n\n")
	fmt.Fprintf(&sb, "Fast cluster: %s. `synchro run` built from `./cmd/synchro`, run as a subprocess; "+
		"VmHWM of its /proc status sampled every 50 ms. Goal: peak RSS < %d MB.\n\n", fastSettings(ctx, conn), memLimitMB)
	sb.WriteString("| rows in the txn | WAL MB | write s (fenced INSERT … SELECT) | materialize s (from process start) | rows/s | peak RSS MB (VmHWM) | RSS at end MB | idle runner RSS MB | verdict | load (start→end) |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n")
	fmt.Fprintf(&sb, "| %d | %.0f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f (HWM %.0f) | %s | %.1f→%.1f (write %.1f) |\n",
		n, float64(walBytes)/1e6, writeSec, matSec, float64(n)/matSec, hwm, rss, idleRSS, idleHWM, verdict, load, loadEnd, writeLoad)
	return sb.String(), nil
}

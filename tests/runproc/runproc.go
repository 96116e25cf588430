// Package runproc runs `synchro run` as a subprocess for crash tests: built once per
// test (optionally with the synchrofaults tag, internal/fault), started with short
// intervals, killed with SIGKILL from outside or by its own fault point, and read
// through its stderr and /metrics.
package runproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/synchro/synchro/internal/fault"
)

// FaultTag is the build tag that compiles the fault points in.
const FaultTag = "synchrofaults"

// Build builds cmd/synchro into dir (with the given build tags) and returns the
// binary's path.
func Build(ctx context.Context, dir string, tags ...string) (string, error) {
	bin := filepath.Join(dir, "synchro")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "github.com/synchro/synchro/cmd/synchro")
	out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("runproc: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}

// BuildT builds cmd/synchro into a temporary directory of t, failing t on error.
func BuildT(t testing.TB, tags ...string) string {
	t.Helper()
	bin, err := Build(context.Background(), t.TempDir(), tags...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Options start one `synchro run`.
type Options struct {
	Bin         string
	DatabaseURL string
	Slot        string
	// Fault arms a fault point (SYNCHRO_FAULT; needs a binary built with FaultTag).
	Fault string
	// Args are extra flags of `synchro run` (they override the defaults: the last
	// occurrence of a flag wins).
	Args []string
	// Env is added to the environment.
	Env []string
}

// Proc is one running (or exited) `synchro run`.
type Proc struct {
	cmd  *exec.Cmd
	Addr string // /livez, /readyz, /metrics

	done  chan struct{}
	state *os.ProcessState

	mu    sync.Mutex
	lines []string
	logWG sync.WaitGroup
}

// Start starts `synchro run` with short intervals (heartbeat 250ms, standby 1s,
// backoff up to 500ms, metrics 200ms) on a free local address.
func Start(opts Options) (*Proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--slot", opts.Slot, "--listen", addr,
		"--heartbeat-interval", "250ms", "--standby-interval", "1s", "--receive-timeout", "5s",
		"--backoff-max", "500ms", "--metrics-interval", "200ms"}
	args = append(args, opts.Args...)
	cmd := exec.Command(opts.Bin, args...)
	env := append(os.Environ(), "SYNCHRO_DATABASE_URL="+opts.DatabaseURL)
	env = slicesDeleteEnv(env, fault.Env)
	if opts.Fault != "" {
		env = append(env, fault.Env+"="+opts.Fault)
	}
	cmd.Env = append(env, opts.Env...)
	// Its own process group: a terminal's Ctrl-C is the test's, not the runner's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, Addr: addr, done: make(chan struct{})}
	p.logWG.Go(func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	})
	go func() {
		p.logWG.Wait() // stderr drained before Wait closes it
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return p, nil
}

// StartT starts a Proc and stops it (SIGTERM, then SIGKILL) when t ends; its log is
// written to t when t failed.
func StartT(t testing.TB, opts Options) *Proc {
	t.Helper()
	p, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("synchro run (%s):\n%s", p.Exit(), p.Logs())
		}
	})
	return p
}

func slicesDeleteEnv(env []string, name string) []string {
	out := env[:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to timeout for the process to exit; false if it still runs.
func (p *Proc) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Killed reports whether the process exited by SIGKILL.
func (p *Proc) Killed() bool {
	if !p.Exited() {
		return false
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// Exit describes how the process ended ("running" while it runs).
func (p *Proc) Exit() string {
	if !p.Exited() {
		return "running"
	}
	return p.state.String()
}

// Kill sends SIGKILL and waits for the exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM (a clean stop) and waits up to timeout, then kills. It returns
// an error unless the process exited with status 0 on SIGTERM (or had exited before).
func (p *Proc) Stop(timeout time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if !p.Wait(timeout) {
		p.Kill()
		return errors.New("runproc: no exit within the stop timeout: killed")
	}
	if !p.state.Success() {
		return fmt.Errorf("runproc: stop: %s", p.state)
	}
	return nil
}

// Logs is the process's stderr so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// FaultReached is the fault point the process killed itself at (from its last
// words on stderr), "" when none.
func (p *Proc) FaultReached() fault.Point {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.lines) - 1; i >= 0; i-- {
		if rest, ok := strings.CutPrefix(p.lines[i], "synchro-fault: point="); ok {
			name, _, _ := strings.Cut(rest, " ")
			return fault.Point(name)
		}
	}
	return ""
}

// Get returns the status and body of one of the process's endpoints; 0 when nothing
// answers.
func (p *Proc) Get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.Addr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metric reads one sample of /metrics: name with exactly these label pairs
// (name, value, ...) among its labels; ok false when absent or unreachable.
func (p *Proc) Metric(name string, labels ...string) (float64, bool) {
	code, body := p.Get("/metrics")
	if code != http.StatusOK {
		return 0, false
	}
	return ParseMetric(body, name, labels...)
}

// ParseMetric reads one sample from Prometheus text.
func ParseMetric(body, name string, labels ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series, value := line[:sp], line[sp+1:]
		metricName, labelText, _ := strings.Cut(series, "{")
		if metricName != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(labelText, labels[i]+`="`+labels[i+1]+`"`) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		return v, err == nil
	}
	return 0, false
}

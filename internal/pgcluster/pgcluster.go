// Package pgcluster runs a private PostgreSQL cluster from the system binaries, for the
// test harness and `synchro dev`.
//
// The postmaster is a direct child of this process (not daemonized by pg_ctl), started
// with a parent-death signal: when a test binary is killed by its timeout, the cluster
// shuts down with it instead of leaking. Stop, StopImmediate and Restart send the same
// signals pg_ctl would (SIGINT for fast shutdown, SIGQUIT for immediate).
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultBinDir holds the PostgreSQL 15 server binaries on Debian and Ubuntu.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// maxSocketPath is the longest Unix socket path Linux accepts (sun_path minus the NUL).
const maxSocketPath = 107

// Options configure Start. The zero value is a throw-away cluster in a temp dir on a
// free port.
type Options struct {
	// Dir holds the cluster: data/ (PGDATA), postgres.log and the Unix socket. Empty:
	// a new temp dir under TempRoot, removed by Stop. An existing initialized Dir is
	// reused.
	Dir string
	// TempRoot is where an empty Dir makes its temp dir. Empty: os.TempDir().
	TempRoot string
	// Port on 127.0.0.1. Zero: a free port.
	Port int
	// Durable keeps fsync and full_page_writes on. Off by default: a test cluster does
	// not survive an OS crash, only a postmaster crash. synchronous_commit stays on
	// either way, since logical decoding tests depend on commit-time durability order.
	Durable bool
	// BinDir holds initdb and postgres. Empty: $SYNCHRO_PG_BIN, else DefaultBinDir.
	BinDir string
	// Logger receives lifecycle events. Nil: discarded.
	Logger *slog.Logger
	// ExtraConf is appended to the generated settings and overrides them. Values are
	// written quoted, which PostgreSQL accepts for every setting type.
	ExtraConf map[string]string
}

// Cluster is a running (or stopped) private cluster.
type Cluster struct {
	dir     string
	dataDir string
	binDir  string
	port    int
	ownDir  bool // Dir was a temp dir made by Start; Stop removes it
	logger  *slog.Logger
	cred    *syscall.Credential // non-nil when running as root: run as postgres

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc exits
}

// Start initializes the cluster if needed, writes its settings and starts it, returning
// once it accepts connections.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	return startWith(ctx, opts, freePort)
}

// startWith is Start with the port picker (opts.Port 0) given: freePort, or a test's.
func startWith(ctx context.Context, opts Options, pick func() (int, error)) (*Cluster, error) {
	c := &Cluster{logger: opts.Logger, binDir: opts.BinDir, port: opts.Port}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	if c.binDir == "" {
		c.binDir = os.Getenv("SYNCHRO_PG_BIN")
	}
	if c.binDir == "" {
		c.binDir = DefaultBinDir
	}
	// Absolute: initdb and postgres run in the cluster dir, not in ours.
	if abs, err := filepath.Abs(c.binDir); err == nil {
		c.binDir = abs
	}
	if _, err := os.Stat(filepath.Join(c.binDir, "postgres")); err != nil {
		return nil, fmt.Errorf("pgcluster: postgres binaries not found in %s (set SYNCHRO_PG_BIN): %w", c.binDir, err)
	}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			return nil, err
		}
		c.cred = cred
		// Binaries unpacked under /root (scripts/fetch-pg's cache as root is elsewhere
		// for this reason) cannot be run by the postgres user.
		if err := c.checkReachable(c.binDir); err != nil {
			return nil, fmt.Errorf("%w (binaries in %s)", err, c.binDir)
		}
	}
	if err := c.prepareDir(opts.Dir, opts.TempRoot); err != nil {
		return nil, err
	}
	cleanup := func() {
		if c.ownDir {
			_ = os.RemoveAll(c.dir)
		}
	}
	if err := c.initdb(ctx); err != nil {
		cleanup()
		return nil, err
	}
	if err := c.startOnPort(ctx, opts, pick); err != nil {
		cleanup()
		return nil, err
	}
	return c, nil
}

// startOnPort writes the configuration and starts the server on opts.Port, or on a
// port pick chooses. A chosen port is free when chosen but not reserved: another
// process (a parallel test's cluster) can bind it before the postmaster does, so a
// start that failed to bind is retried on another chosen port, three times at most.
func (c *Cluster) startOnPort(ctx context.Context, opts Options, pick func() (int, error)) error {
	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			p, err := pick()
			if err != nil {
				return err
			}
			c.port = p
		}
		if err := c.writeConf(opts); err != nil {
			return err
		}
		err := c.start(ctx)
		if err == nil || opts.Port != 0 || attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
		c.logger.Warn("pgcluster: the chosen port was taken before the server bound it; choosing another", "port", c.port)
	}
}

// URL is a connection URL for dbname as the bootstrap superuser postgres.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, dbname)
}

// Port is the TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir is the cluster directory (PGDATA is its data subdirectory).
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the cluster down (fast: active sessions are disconnected, then a
// checkpoint) and removes the directory if Start made it. Safe to call twice.
func (c *Cluster) Stop() error {
	err := c.shutdown(syscall.SIGINT, "fast")
	if c.ownDir {
		if rmErr := os.RemoveAll(c.dir); rmErr != nil {
			err = errors.Join(err, fmt.Errorf("pgcluster: remove %s: %w", c.dir, rmErr))
		}
	}
	return err
}

// StopImmediate kills the cluster without a checkpoint, as a crash would; the next
// start runs crash recovery. The directory stays for Restart.
func (c *Cluster) StopImmediate() error {
	return c.shutdown(syscall.SIGQUIT, "immediate")
}

// Restart stops the cluster (fast) if it is running, then starts it again on the same
// directory and port.
func (c *Cluster) Restart(ctx context.Context) error {
	if err := c.shutdown(syscall.SIGINT, "fast"); err != nil {
		return err
	}
	return c.start(ctx)
}

func (c *Cluster) prepareDir(dir, tempRoot string) error {
	if dir == "" {
		d, err := os.MkdirTemp(tempRoot, "pgcluster-")
		if err != nil {
			return fmt.Errorf("pgcluster: temp dir: %w", err)
		}
		dir, c.ownDir = d, true
	} else {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("pgcluster: dir: %w", err)
		}
		dir = abs
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("pgcluster: dir: %w", err)
		}
		if err := ownEntriesOnly(dir); err != nil {
			return err
		}
	}
	c.dir = dir
	c.dataDir = filepath.Join(dir, "data")
	if c.cred == nil {
		return nil
	}
	if err := c.checkReachable(filepath.Dir(dir)); err != nil {
		return err
	}
	// The postgres user must own everything (initdb and postgres refuse root).
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(c.cred.Uid), int(c.cred.Gid))
	})
}

// clusterEntries are the names a cluster directory holds: the data directory, an
// initdb's directory until it is renamed to it (left by an interrupted first start,
// and removed by the next), and the server's log (and its Unix socket,
// .s.PGSQL.<port>, with its lock file).
var clusterEntries = map[string]bool{"data": true, "data.initdb": true, "postgres.log": true}

// ownEntriesOnly refuses a directory that holds anything a cluster does not make: as
// root, the whole directory is handed to the postgres OS user, and `synchro dev --dir
// /tmp` or a project's folder gave every file in it away (TestDeployEdgeDevDirKeepsForeignFiles).
// An empty directory, or one a cluster made, is used.
func ownEntriesOnly(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("pgcluster: dir: %w", err)
	}
	for _, e := range entries {
		// The server's Unix socket and its lock file: left behind by a crash, and
		// cleared by the server itself at the next start.
		if !clusterEntries[e.Name()] && !strings.HasPrefix(e.Name(), ".s.PGSQL.") {
			return fmt.Errorf("pgcluster: %s holds files that are not a cluster's (%d entries): use an empty or new directory", dir, len(entries))
		}
	}
	return nil
}

// checkReachable fails clearly when the postgres user cannot traverse to dir (a 0700
// root-owned parent such as a t.TempDir or /root), instead of initdb's bare "permission
// denied".
func (c *Cluster) checkReachable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && st.Uid != c.cred.Uid && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgcluster: the postgres OS user cannot traverse %s (mode %v, owner uid %d); use a directory it can reach", d, fi.Mode().Perm(), st.Uid)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func (c *Cluster) initdb(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		if _, err := os.Stat(filepath.Join(c.dataDir, "global", "pg_control")); err != nil {
			// Left by an initdb killed halfway before initdb ran in a directory of
			// its own: not a cluster, and not ours to delete.
			return fmt.Errorf("pgcluster: %s holds no cluster (no global/pg_control: an interrupted initdb?): remove it and start again", c.dataDir)
		}
		c.logger.Info("pgcluster: reusing data directory", "dir", c.dataDir)
		return nil
	}
	start := time.Now()
	// Into a directory of its own, renamed to the data directory once it succeeded:
	// an initdb killed halfway (a Ctrl-C during synchro dev's first start kills it,
	// and it cannot clean up) left PG_VERSION behind, and every later start reused
	// a cluster without pg_control (TestDevInterruptedInitdbThenRerun).
	tmp := c.dataDir + ".initdb"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("pgcluster: remove an unfinished initdb: %w", err)
	}
	cmd := c.command(ctx, "initdb",
		"-D", tmp, "-U", "postgres", "-A", "trust", "--no-sync",
		"-E", "UTF8", "--locale=C", "--no-instructions")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
	}
	if err := os.Rename(tmp, c.dataDir); err != nil {
		return fmt.Errorf("pgcluster: initdb: %w", err)
	}
	c.logger.Info("pgcluster: initdb done", "dir", c.dataDir, "took", time.Since(start))
	return nil
}

// writeConf writes synchro.conf (rewritten at every Start, so the port can change) and
// includes it from postgresql.conf once; pg_hba.conf is replaced.
func (c *Cluster) writeConf(opts Options) error {
	socketDir := c.dir
	if len(socketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		c.logger.Warn("pgcluster: dir too long for a Unix socket, TCP only", "dir", c.dir)
		socketDir = ""
	}
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": socketDir,
		"wal_level":               "logical",
		"max_replication_slots":   "100",
		"max_wal_senders":         "100",
		"max_connections":         "300",
		"wal_sender_timeout":      "60s",
		"shared_buffers":          "128MB",
		"synchronous_commit":      "on",
		"logging_collector":       "off",
	}
	if !opts.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range opts.ExtraConf {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by pgcluster at every start; edits are lost.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = '%s'\n", k, strings.ReplaceAll(settings[k], "'", "''"))
	}
	if err := c.writeFile("synchro.conf", b.String()); err != nil {
		return err
	}

	const include = "include 'synchro.conf'"
	mainConf := filepath.Join(c.dataDir, "postgresql.conf")
	cur, err := os.ReadFile(mainConf)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if !bytes.Contains(cur, []byte(include)) {
		if err := c.writeFile("postgresql.conf", string(cur)+"\n"+include+"\n"); err != nil {
			return err
		}
	}

	return c.writeFile("pg_hba.conf", strings.Join([]string{
		"# Written by pgcluster at every start; edits are lost.",
		"local all         all              trust",
		"local replication all              trust",
		"host  all         all 127.0.0.1/32 trust",
		"host  replication all 127.0.0.1/32 trust",
		"",
	}, "\n"))
}

func (c *Cluster) writeFile(name, content string) error {
	p := filepath.Join(c.dataDir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", name, err)
	}
	if c.cred != nil {
		if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgcluster: chown %s: %w", name, err)
		}
	}
	return nil
}

func (c *Cluster) start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return errors.New("pgcluster: already running")
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: log file: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor

	started := time.Now()
	// Not exec.CommandContext: ctx bounds the start, not the cluster's lifetime.
	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), "-D", c.dataDir)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: c.cred,
		Setpgid:    true,            // a terminal's Ctrl-C reaches us, not the postmaster
		Pdeathsig:  syscall.SIGQUIT, // parent gone: immediate shutdown, no orphan
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	if err := c.waitReady(ctx, done); err != nil {
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		<-done
		return fmt.Errorf("%w\n%s", err, tail(logPath, 20))
	}
	c.proc, c.done = cmd, done
	c.logger.Info("pgcluster: ready", "port", c.port, "dir", c.dir, "took", time.Since(started))
	return nil
}

// waitReady connects until the server answers a query, the postmaster exits, or 30s.
func (c *Cluster) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Each attempt is bounded on its own, so a postmaster that exited is noticed
		// between attempts: a port that something else holds can accept the TCP
		// connection and never answer.
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		conn, err := pgx.Connect(actx, c.URL("postgres"))
		if err == nil {
			// The server that answers must be this one: when the port was taken, our
			// postmaster fails to bind and exits, and the connection reached the other
			// server (a second `synchro dev` on the same port installed into the first
			// one's database: found by review).
			var dir string
			if err = conn.QueryRow(actx, `SELECT current_setting('data_directory')`).Scan(&dir); err == nil && !sameDir(dir, c.dataDir) {
				err = fmt.Errorf("pgcluster: port %d is served by another PostgreSQL (data directory %s)", c.port, dir)
			}
			_ = conn.Close(context.WithoutCancel(actx))
		}
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("pgcluster: postgres exited during startup")
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: not ready: %w (last error: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// sameDir reports whether two paths name one directory (symbolic links resolved).
func sameDir(a, b string) bool {
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	if errA != nil || errB != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

func (c *Cluster) shutdown(sig syscall.Signal, mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	start := time.Now()
	if err := c.proc.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgcluster: stop (%s): %w", mode, err)
	}
	select {
	case <-c.done:
	case <-time.After(60 * time.Second):
		_ = c.proc.Process.Kill()
		<-c.done
		c.proc, c.done = nil, nil
		return fmt.Errorf("pgcluster: stop (%s): postmaster did not exit in 60s, killed", mode)
	}
	c.proc, c.done = nil, nil
	c.logger.Info("pgcluster: stopped", "mode", mode, "took", time.Since(start))
	return nil
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.dir // the postgres user may not be able to read our working directory
	return cmd
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs the postgres OS user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: postgres uid: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: postgres gid: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of a file, for startup error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

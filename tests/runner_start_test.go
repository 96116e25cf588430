package tests

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/runproc"
)

// forwarder forwards every connection accepted on its listener to target. It is
// the network path to the real server, nothing else: the test opens it late to stand
// for a PostgreSQL that is not up yet when the runner starts.
type forwarder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startForwarder(t *testing.T, addr, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	f := &forwarder{ln: ln, target: target}
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, s)
		f.mu.Unlock()
		f.wg.Go(func() { _, _ = io.Copy(s, c); s.Close(); c.Close() })
		f.wg.Go(func() { _, _ = io.Copy(c, s); s.Close(); c.Close() })
	}
}

// close stops accepting and cuts every forwarded connection.
func (f *forwarder) close() {
	_ = f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// `synchro run` started while PostgreSQL cannot be reached yet (nothing listens at its
// address: connection refused) does not exit: it retries its first claim with
// backoff, logging why, and streams once the server is there. Red when the first claim
// is not retried (the process exits 1 on the first refused connection).
func TestRunnerWaitsForDatabaseAtStart(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)

	// A local port where nothing listens yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	target := u.Host
	u.Host = addr

	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: u.String(), Slot: runnerSlot(db)})
	retries := func() int { return strings.Count(p.Logs(), "cannot reach the database to claim it yet: retrying") }
	eventually(t, 60*time.Second, "three refused first claims, each logged", func() bool {
		return retries() >= 3 || p.Exited()
	})
	require.False(t, p.Exited(), "the runner gave up while the server was unreachable (%s):\n%s", p.Exit(), p.Logs())
	require.Contains(t, p.Logs(), "connect", "the retry says why")

	// The server comes up.
	startForwarder(t, addr, target)

	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	waitEffects(t, db, 1)
	require.False(t, p.Exited(), "exit: %s", p.Exit())
	require.NoError(t, p.Stop(30*time.Second), "a clean stop after a late first claim")
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// syncBuffer is a goroutine-safe output stream.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testEnv() (*env, *syncBuffer) {
	out := &syncBuffer{}
	return &env{stdout: out, stderr: io.Discard, logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, out
}

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

// readyDB is a database with one registered, activated table.
func readyDB(t *testing.T) *testdb.DB {
	t.Helper()
	db := testdb.New(t)
	_, err := db.Pool.Exec(context.Background(), `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO items (id, owner) VALUES (1, 'a');`)
	require.NoError(t, err)
	return db
}

// sidecar runs `synchro run`'s serveRunner until the test ends; returns the base URL.
func sidecar(t *testing.T, db *testdb.DB) string {
	t.Helper()
	slot := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	e, _ := testEnv()
	// Port 0: serveRunner binds a free port itself and logs it. A port chosen free here
	// and closed again could be taken (by any outgoing connection's ephemeral port)
	// before serveRunner bound it.
	logs := &syncBuffer{}
	e.logger = slog.New(slog.NewTextHandler(logs, nil))
	go func() {
		done <- serveRunner(ctx, e, runner.Config{
			DatabaseURL: db.URL, Slot: slot, HeartbeatInterval: 250 * time.Millisecond,
			StandbyInterval: time.Second, IdleInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		}, "127.0.0.1:0")
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Errorf("the sidecar did not stop")
		}
	})
	var addr string
	require.Eventually(t, func() bool {
		m := listenRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 60*time.Second, 20*time.Millisecond, "serveRunner did not log the address it listens on")
	return "http://" + addr
}

// listenRE finds the address serveRunner bound, in its "serving probes and metrics"
// log line (text handler: listen=host:port).
var listenRE = regexp.MustCompile(`msg="serving probes and metrics" listen=(\S+)`)

type readyz struct {
	Ready   bool     `json:"ready"`
	Failing []string `json:"failing"`
}

func getReadyz(t *testing.T, base string) (int, readyz, bool) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, readyz{}, false // not listening yet
	}
	defer resp.Body.Close()
	var body readyz
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body, true
}

func waitReadyz(t *testing.T, base string, cond func(code int, body readyz) bool) (int, readyz) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body, ok := getReadyz(t, base)
		if ok && cond(code, body) {
			return code, body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: last answer %d %+v", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// /readyz of a running sidecar: 200 once synchro.ready() is true, 503 with the failing
// check names (and nothing else) when a condition breaks.
func TestReadyz(t *testing.T) {
	t.Parallel()
	db := readyDB(t)
	base := sidecar(t, db)
	code, body := waitReadyz(t, base, func(code int, _ readyz) bool { return code == http.StatusOK })
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, readyz{Ready: true, Failing: []string{}}, body)

	_, err := db.Pool.Exec(context.Background(), `ALTER TABLE items DISABLE TRIGGER synchro_fence_insert`)
	require.NoError(t, err)
	code, body = waitReadyz(t, base, func(code int, _ readyz) bool { return code != http.StatusOK })
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, readyz{Ready: false, Failing: []string{"triggers"}}, body)

	_, err = db.Pool.Exec(context.Background(), `ALTER TABLE items ENABLE TRIGGER synchro_fence_insert`)
	require.NoError(t, err)
	waitReadyz(t, base, func(code int, _ readyz) bool { return code == http.StatusOK })
}

// /readyz before the runner made its stream names the checks that fail then.
func TestReadyzBeforeStream(t *testing.T) {
	t.Parallel()
	db := testdb.New(t) // nothing registered: the publication does not exist either
	base := sidecar(t, db)
	code, body := waitReadyz(t, base, func(int, readyz) bool { return true })
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.False(t, body.Ready)
	require.Contains(t, body.Failing, "registry")
	require.Contains(t, body.Failing, "publication")
}

// `synchro ready` prints the table and exits 0 only when ready.
func TestReadyCommand(t *testing.T) {
	t.Parallel()
	db := readyDB(t)
	ctx := context.Background()

	e, out := testEnv()
	require.Equal(t, 1, run(ctx, e, []string{"ready", "--database-url", db.URL}))
	require.Contains(t, out.String(), "CHECK")
	require.Contains(t, out.String(), "not ready: database, worker, heartbeat, slot, progress, wal_lag, commit_lag")

	e, _ = testEnv()
	require.NotEqual(t, 0, run(ctx, e, []string{"ready", "--bogus"}))

	sidecar(t, db)
	deadline := time.Now().Add(60 * time.Second)
	for {
		e, out = testEnv()
		if run(ctx, e, []string{"ready", "--database-url", db.URL}) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("synchro ready never exited 0:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 13, out.String()) // header, eleven checks, "ready"
	require.Equal(t, "ready", lines[12])
	for _, l := range lines[1:12] {
		require.Regexp(t, `^[a-z_]+\s+true\s+`, l)
	}
}

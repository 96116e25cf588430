package main

// Independent review of the CLI and the sidecar as an operator uses them in
// production. Every test is named TestCLI...; a red one demonstrates a bug.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// reviewSecret is the password the leak tests plant; no output may contain it, nor
// its tail (a partial redaction still leaks most of a password).
const (
	reviewSecret     = "hunter2SECRET"
	reviewSecretTail = "SECRET"
)

// reviewEnv captures stdout, stderr and the logger (text handler, as main's) in one
// buffer.
func reviewEnv() (*env, *syncBuffer) {
	out := &syncBuffer{}
	return &env{stdout: out, stderr: out, logger: slog.New(slog.NewTextHandler(out, nil))}, out
}

// closedPort is a TCP port on 127.0.0.1 nothing listens on (bound, then closed).
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

// runWithin runs `synchro args...` in-process with a deadline; it returns the exit
// code and whether the command returned before the deadline (rather than because
// the deadline cancelled it, which main turns into a clean exit).
func runWithin(t *testing.T, d time.Duration, args ...string) (code int, early bool, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e, buf := reviewEnv()
	code = run(ctx, e, args)
	return code, ctx.Err() == nil, buf.String()
}

// docs/configuration.md: "The password of a connection URL never appears in logs or
// errors." A connection string that does not parse is the likeliest one to be logged
// (a typo in a deploy), and the CLI wraps pgx's parse error, whose own redaction is
// best effort, verbatim after its own redacted copy. Every string here is a libpq
// keyword/value string with one mistake (a bad port or sslmode).
func TestCLIPasswordNotInParseErrors(t *testing.T) {
	t.Parallel()
	dsns := map[string]string{
		"spaces around =":       "host=127.0.0.1 port=notaport user=u dbname=d password = " + reviewSecret,
		"space after =":         "host=127.0.0.1 port=5432 sslmode=bogus user=u dbname=d password= " + reviewSecret,
		"quoted, escaped quote": `host=127.0.0.1 port=notaport user=u dbname=d password='it\'s ` + reviewSecret + `'`,
	}
	commands := [][]string{{"ready"}, {"migrate", "up"}, {"migrate", "status"}, {"dev"}}
	for name, dsn := range dsns {
		for _, cmd := range commands {
			t.Run(name+"/"+strings.Join(cmd, "_"), func(t *testing.T) {
				t.Parallel()
				args := append(append([]string{}, cmd...), "--database-url", dsn)
				code, early, out := runWithin(t, 20*time.Second, args...)
				require.True(t, early, "synchro %v did not return", args)
				require.Equal(t, 1, code, out)
				require.NotContains(t, out, reviewSecretTail, "synchro %v logged the password:\n%s", cmd, out)
			})
		}
	}
}

// libpq (and pgx) accept a backslash-escaped space in an unquoted keyword/value
// password: `password=correct\ horse`. redactURL stops at the space, so the rest of
// the password reaches the log: here through `synchro migrate up`'s failure line (the
// server is down), and, identically, through the startup lines of `migrate up` and
// `run` ("installing database=...", "serving probes and metrics database=...").
func TestCLIRedactsBackslashEscapedPassword(t *testing.T) {
	t.Parallel()
	dsn := fmt.Sprintf(`host=127.0.0.1 port=%d user=u dbname=d connect_timeout=2 password=abc\ %s`, closedPort(t), reviewSecret)
	require.NotContains(t, describeDB(dsn), reviewSecretTail, "describeDB(%q)", dsn)

	code, early, out := runWithin(t, 20*time.Second, "migrate", "up", "--database-url", dsn)
	require.True(t, early)
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, reviewSecretTail, "the log line:\n%s", out)
}

// sslpassword is the passphrase of the client's TLS key, a credential like password;
// pgx accepts it as a URL query parameter. redactURL masks only "password" in the URL
// form (the keyword/value form is masked, the regexp matching inside "sslpassword").
func TestCLIRedactsSSLPasswordInURL(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?connect_timeout=2&sslmode=disable&sslpassword=%s", closedPort(t), reviewSecret)
	require.NotContains(t, describeDB(url), reviewSecretTail, "describeDB(%q)", url)
	kv := "host=h sslpassword=" + reviewSecret
	require.NotContains(t, describeDB(kv), reviewSecretTail, "describeDB(%q)", kv)

	code, early, out := runWithin(t, 20*time.Second, "ready", "--database-url", url)
	require.True(t, early)
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, reviewSecretTail, "the log line:\n%s", out)
}

// The sidecar, started as an operator starts it (`synchro run`, every flag on the
// command line), with a URL holding an sslpassword: its startup line must not carry
// it. Stopped (main's context cancelled, as SIGTERM does), it exits 0.
func TestCLIRunStartupLogRedacted(t *testing.T) {
	t.Parallel()
	db := readyDB(t)
	slot := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	url := db.URL
	if strings.Contains(url, "?") {
		url += "&sslpassword=" + reviewSecret
	} else {
		url += "?sslpassword=" + reviewSecret
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, out := reviewEnv()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"run", "--database-url", url, "--slot", slot, "--listen", "127.0.0.1:0",
			"--heartbeat-interval", "250ms", "--standby-interval", "1s"})
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "runner claimed the database") },
		60*time.Second, 20*time.Millisecond, "the runner did not start:\n%s", out.String())
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, "exit status after SIGTERM:\n%s", out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("synchro run did not stop")
	}
	require.NotContains(t, out.String(), reviewSecretTail, "the sidecar logged the sslpassword:\n%s", out.String())
}

// A flag value the runner cannot use must stop `synchro run` at once (exit 1), as the
// same value in the flag's SYNCHRO_* variable does ("An invalid value ... stops the
// command"; fail closed). Instead, a zero or negative --batch-txns, --batch-events,
// --batch-bytes, --buffer-bytes, --apply-sessions or a negative duration is silently
// replaced by the default, and the runner starts. The database URL points at a
// closed port: a runner that starts retries its first claim until the deadline, and
// the deadline's cancellation then reads as a clean stop (exit 0).
func TestCLIRunRejectsBadFlagValues(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=1", closedPort(t))
	for _, bad := range [][]string{
		{"--batch-txns", "0"},
		{"--batch-txns", "-5"},
		{"--batch-events", "-1"},
		{"--batch-bytes", "-1"},
		{"--buffer-bytes", "0"},
		{"--apply-sessions", "0"},
		{"--heartbeat-interval", "-5s"},
		{"--backoff-max", "-1s"},
		{"--batch-delay", "-100ms"},
	} {
		t.Run(strings.TrimPrefix(bad[0], "--")+"="+bad[1], func(t *testing.T) {
			t.Parallel()
			args := append([]string{"run", "--database-url", url, "--listen", "127.0.0.1:0"}, bad...)
			code, early, out := runWithin(t, 3*time.Second, args...)
			require.True(t, early && code != 0,
				"synchro run %s %s was accepted (the runner started; exit %d once stopped):\n%s", bad[0], bad[1], code, out)
		})
	}
}

// The same values through their variables are refused, naming the variable (the
// documented behaviour the flags above should match).
func TestCLIRunRejectsBadEnvValues(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{envBatchTxns, "0"},
		{envBatchTxns, "-5"},
		{envBatchEvents, "x"},
		{envBufferBytes, "-1"},
		{envApplySess, "0"},
		{envHeartbeat, "-5s"},
		{envBatchDelay, "soon"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			code, early, out := runWithin(t, 3*time.Second, "run", "--database-url", "postgres://u@127.0.0.1:1/d")
			require.True(t, early)
			require.Equal(t, 1, code, out)
			require.Contains(t, out, tc.name)
			require.NotContains(t, out, "runner claimed")
		})
	}
}

// docs/configuration.md: "Flags win over their SYNCHRO_* variable, which wins over the
// default." A flag given on the command line wins; an invalid leftover value in the
// variable it overrides must not stop the command, nor keep `-h` from printing help.
func TestCLIFlagWinsOverInvalidEnv(t *testing.T) {
	t.Setenv(envBatchTxns, "lots")
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=1", closedPort(t))
	code, early, out := runWithin(t, 2*time.Second, "run", "-h")
	assert.True(t, early)
	assert.Equal(t, 0, code, "synchro run -h with %s set to an invalid value:\n%s", envBatchTxns, out)

	code, early, out = runWithin(t, 2*time.Second, "run", "--database-url", url, "--listen", "127.0.0.1:0", "--batch-txns", "10")
	assert.False(t, early && code != 0,
		"--batch-txns 10 on the command line, yet the invalid %s stopped the command:\n%s", envBatchTxns, out)
}

// `synchro migrate -h` prints the usage (docs: "`synchro <command> -h` prints the same
// list"); it should exit 0 like every other command's -h, not fail with
// `unknown subcommand "-h"`.
func TestCLIMigrateHelpExitsZero(t *testing.T) {
	t.Parallel()
	code, _, out := runWithin(t, 5*time.Second, "migrate", "-h")
	require.Contains(t, out, "usage: synchro migrate")
	require.Equal(t, 0, code, out)
}

// `synchro migrate up` takes no arguments: a stray word (`synchro migrate up status`,
// a mistyped flag without its dashes) must be refused, as `run`, `ready` and `dev`
// refuse theirs, not ignored while the migration runs.
func TestCLIMigrateRejectsExtraArgs(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=1", closedPort(t))
	code, early, out := runWithin(t, 10*time.Second, "migrate", "up", "--database-url", url, "status")
	require.True(t, early)
	require.Equal(t, 1, code)
	require.Contains(t, out, "unexpected arguments", "the stray argument was ignored and the install attempted:\n%s", out)
}

// A rollback deploy runs the previous release's `synchro migrate up` against a database
// a newer release migrated. goose applies nothing (every embedded migration is
// recorded), and Install then re-applies the older release's function files over the
// newer schema: a silent mix of a newer schema and older functions, reported as
// "installed" with exit 0; `migrate status` shows every migration applied and says
// nothing of the newer one. Fail closed: refuse, naming the newer version.
func TestCLIMigrateRefusesNewerDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	// A release "from the future": one more migration recorded, and a function whose
	// definition that release changed (synchro.ready: "= 12" for a twelfth check).
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (99999, true);
		CREATE OR REPLACE FUNCTION synchro.ready() RETURNS boolean
		LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
		AS $$ SELECT /* release 99999 */ coalesce(pg_catalog.count(*) = 11 AND pg_catalog.bool_and(r.ok), false)
		      FROM synchro._readiness(false) r $$;`)
	require.NoError(t, err)

	e, out := reviewEnv()
	code := run(ctx, e, []string{"migrate", "status", "--database-url", db.URL})
	require.Equal(t, 0, code, out.String())
	statusOut := out.String()

	e, out = reviewEnv()
	code = run(ctx, e, []string{"migrate", "up", "--database-url", db.URL})
	assert.NotEqual(t, 0, code,
		"synchro migrate up (pack %s) re-applied its functions over a database at migration 99999 and exited 0:\n%s\nstatus said:\n%s",
		synchro.Hash()[:12], out.String(), statusOut)
	assert.Contains(t, out.String(), "99999")
	var src string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE oid = 'synchro.ready()'::regprocedure`).Scan(&src))
	assert.Contains(t, src, "release 99999", "the newer release's synchro.ready() was replaced by this binary's")
}

// The sidecar's probes bind the loopback interface unless told otherwise (docs:
// `127.0.0.1:8080`).
func TestCLIRunDefaultListenLoopback(t *testing.T) {
	t.Parallel()
	e, out := reviewEnv()
	code := run(context.Background(), e, []string{"run", "-h"})
	require.Equal(t, 0, code)
	require.Contains(t, out.String(), `(default "127.0.0.1:8080")`)
}

// `synchro ready` against a server that is down exits 1 quickly with the redacted URL.
func TestCLIReadyServerDown(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u:%s@127.0.0.1:%d/d?sslmode=disable", reviewSecret, closedPort(t))
	code, early, out := runWithin(t, 20*time.Second, "ready", "--database-url", url)
	require.True(t, early)
	require.Equal(t, 1, code, out)
	require.NotContains(t, out, reviewSecretTail)
}

// startDev runs `synchro dev` until the test ends and returns its printed URL and its
// output buffer.
func startDev(t *testing.T, dir string, port int) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, out := reviewEnv()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"dev", "--dir", dir, "--port", fmt.Sprint(port), "--listen", "127.0.0.1:0"})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("synchro dev did not stop")
		}
	})
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(out.String(), "Try it in psql") {
		select {
		case code := <-done:
			t.Fatalf("synchro dev exited with %d:\n%s", code, out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "synchro dev did not get ready:\n%s", out.String())
		time.Sleep(50 * time.Millisecond)
	}
	m := regexp.MustCompile(`(?m)^  psql '([^']+)'$`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	return m[1], out
}

// `synchro dev --port N` while another PostgreSQL (here another `synchro dev`, with
// its own --dir) already serves 127.0.0.1:N. The new postmaster cannot bind and exits,
// but pgcluster's readiness wait connects to whatever answers on the port (the first
// attempt succeeds against the other server: the postmaster's exit is only looked at
// after a failed attempt), so dev reports its cluster "ready", then installs the pack
// into the other server's database and attaches a runner there. Expected: refuse
// (the port is taken), touching nothing.
func TestCLIDevPortTakenByAnotherServer(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("", "synchro-review-dev-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))

	urlA, _ := startDev(t, filepath.Join(parent, "a"), 0)
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+)/`).FindStringSubmatch(urlA)
	require.NotNil(t, m, urlA)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, out := reviewEnv()
	code := run(ctx, e, []string{"dev", "--dir", filepath.Join(parent, "b"), "--port", m[1], "--listen", "127.0.0.1:0"})
	t.Logf("second synchro dev exited %d (early: %t):\n%s", code, ctx.Err() == nil, out.String())
	blog, _ := os.ReadFile(filepath.Join(parent, "b", "postgres.log"))
	t.Logf("its postgres.log:\n%s", blog)
	var wrong []string
	for marker, what := range map[string]string{
		"pgcluster: ready":           "reported its own (dead) cluster ready",
		"msg=installing":             "installed the pack into the other server's database",
		"Synchro dev database ready": "printed the other server's database as its own",
	} {
		if strings.Contains(out.String(), marker) {
			wrong = append(wrong, what)
		}
	}
	assert.Empty(t, wrong, "the second synchro dev (its postmaster could not bind port %s)", m[1])
	assert.NotEqual(t, 0, code)
}

// blackhole accepts TCP connections and never answers: a half-open network path, a
// hung server or a proxy with no backend. Closed when the test ends.
func blackhole(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// `synchro ready` (a deploy gate, an exec probe) and `synchro migrate` (a deploy step)
// against a server that accepts the connection and never answers: the runner bounds
// every connection attempt (connect_timeout, 10 s when the URL sets none:
// docs/configuration.md), these commands do not, and hang until killed. Expected: a
// bounded attempt and exit 1 (here: within 25 s).
func TestCLIConnectAttemptsAreBounded(t *testing.T) {
	t.Parallel()
	port := blackhole(t)
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable", port)
	for _, cmd := range [][]string{{"ready"}, {"migrate", "up"}, {"migrate", "status"}} {
		t.Run(strings.Join(cmd, "_"), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			code, early, out := runWithin(t, 25*time.Second, append(cmd, "--database-url", url)...)
			assert.True(t, early, "synchro %v still waiting after %s (exit %d once cancelled):\n%s",
				cmd, time.Since(start).Round(time.Second), code, out)
			assert.Equal(t, 1, code)
		})
	}
}

// /readyz while the database does not answer: 503 (fail closed), within its bound,
// with no error text, database name or address in the body. POST is refused.
func TestCLIReadyzDatabaseDown(t *testing.T) {
	t.Parallel()
	port := blackhole(t)
	rd, err := runner.NewReadiness(fmt.Sprintf("postgres://u:%s@127.0.0.1:%d/secretdb?sslmode=disable", reviewSecret, port))
	require.NoError(t, err)
	defer rd.Close()
	srv := httptest.NewServer(runner.Handler(prometheus.NewRegistry(), rd.Ready, nil))
	defer srv.Close()

	start := time.Now()
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotContains(t, string(body), "secretdb")
	require.NotContains(t, string(body), reviewSecretTail)
	require.NotContains(t, string(body), fmt.Sprint(port))

	resp, err = http.Post(srv.URL+"/readyz", "text/plain", strings.NewReader("x"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// `synchro migrate up` interrupted (SIGTERM, a deploy timeout) at any point, then run
// again: the second run completes, and the pack is whole.
func TestCLIMigrateInterruptedThenRerun(t *testing.T) {
	t.Parallel()
	for _, after := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			db := testdb.NewEmpty(t)
			code, _, out := runWithin(t, after, "migrate", "up", "--database-url", db.URL)
			t.Logf("interrupted after %s: exit %d", after, code)
			_ = out
			code, early, out := runWithin(t, 120*time.Second, "migrate", "up", "--database-url", db.URL)
			require.True(t, early)
			require.Equal(t, 0, code, out)
			code, _, out = runWithin(t, 60*time.Second, "migrate", "status", "--database-url", db.URL)
			require.Equal(t, 0, code, out)
			require.NotContains(t, out, "pending", out)
		})
	}
}

// `synchro dev` stopped and started again on the same --dir reuses the cluster and
// its data: idempotent.
func TestCLIDevRestartSameDir(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("", "synchro-review-dev-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	dir := filepath.Join(parent, "dev")
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		e, out := reviewEnv()
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, e, []string{"dev", "--dir", dir, "--port", "0", "--listen", "127.0.0.1:0"})
		}()
		require.Eventually(t, func() bool { return strings.Contains(out.String(), "Try it in psql") },
			120*time.Second, 50*time.Millisecond, "run %d:\n%s", i, out.String())
		if i == 1 {
			require.Contains(t, out.String(), "reusing data directory")
		}
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, out.String())
		case <-time.After(60 * time.Second):
			t.Fatal("synchro dev did not stop")
		}
	}
}

// `synchro dev --listen 127.0.0.1:0` (any free port) tells the user where the probes
// are: the bound address, not ":0".
func TestCLIDevPrintsBoundProbeAddress(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("", "synchro-review-dev-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	_, out := startDev(t, filepath.Join(parent, "dev"), 0)
	require.Regexp(t, `probes and metrics on http://127\.0\.0\.1:[1-9][0-9]*/`, out.String())
}

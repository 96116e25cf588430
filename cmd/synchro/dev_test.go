package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// psqlBinary finds psql: next to the server binaries the tests use, else on PATH.
func psqlBinary(t *testing.T) string {
	t.Helper()
	for _, dir := range []string{os.Getenv("SYNCHRO_PG_BIN"), "/usr/lib/postgresql/15/bin"} {
		if dir == "" {
			continue
		}
		if p := filepath.Join(dir, "psql"); fileExists(p) {
			return p
		}
	}
	p, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql binary (SYNCHRO_PG_BIN, /usr/lib/postgresql/15/bin or PATH)")
	}
	return p
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// `synchro dev` as a new user meets it: a private cluster, the demo seeded, and three
// lines to type into psql. The lines run exactly as printed, typed into one psql
// session connected with the printed command (with a pause before the pull, as a
// person takes, until the runner has materialized the push), and the README shows
// the same lines.
func TestDevTryItLines(t *testing.T) {
	t.Parallel()
	psql := psqlBinary(t)
	// The cluster runs as the postgres OS user when the tests run as root: a parent it
	// can traverse (t.TempDir is 0700).
	parent, err := os.MkdirTemp("", "synchro-dev-test-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, out := testEnv()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, e, []string{"dev", "--dir", filepath.Join(parent, "dev"), "--port", "0", "--listen", "127.0.0.1:0"})
	}()
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "Try it in psql") {
		select {
		case code := <-done:
			t.Fatalf("synchro dev exited with %d:\n%s", code, out.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "synchro dev did not get ready:\n%s", out.String())
		time.Sleep(50 * time.Millisecond)
	}
	printed := out.String()
	m := regexp.MustCompile(`(?m)^  psql '([^']+)'$`).FindStringSubmatch(printed)
	require.NotNil(t, m, printed)
	url := m[1]
	var lines []string
	for _, l := range strings.Split(printed, "\n") {
		if strings.HasPrefix(l, "  SELECT synchro.") {
			lines = append(lines, strings.TrimPrefix(l, "  "))
		}
	}
	require.Len(t, lines, 3, printed)

	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	for _, l := range lines {
		require.Contains(t, string(readme), l, "the README shows the line dev prints")
	}

	// The seeded rows are there (tasks of project 1, whose members are alice and bob).
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var tasks int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM public.tasks WHERE project_id = 1`).Scan(&tasks))
	require.GreaterOrEqual(t, tasks, 2)

	cmd := exec.Command(psql, "-X", "-v", "ON_ERROR_STOP=1", url)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, lines[0]+"\n"+lines[1]+"\n")
	require.NoError(t, err)
	// The pause before the pull: until the runner has materialized the push.
	deadline = time.Now().Add(30 * time.Second)
	for {
		var covered bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM synchro.write_fence
			WHERE client_id = 'device-1' AND coverage IS NOT NULL)`).Scan(&covered))
		if covered {
			break
		}
		require.True(t, time.Now().Before(deadline), "the push was not materialized: %s %s", stdout.String(), stderr.String())
		time.Sleep(20 * time.Millisecond)
	}
	_, err = io.WriteString(stdin, lines[2]+"\n")
	require.NoError(t, err)
	require.NoError(t, stdin.Close())
	require.NoError(t, cmd.Wait(), "psql: %s %s", stdout.String(), stderr.String())
	require.Empty(t, stderr.String())
	got := stdout.String()
	t.Logf("psql output:\n%s", got)
	require.Contains(t, got, `"status": "accepted"`)
	// The pull returns the pushed task as an upsert (its key is the push's "pk").
	require.Contains(t, got, `{"cursor"`)
	pull := got[strings.LastIndex(got, `{"cursor"`):]
	require.Contains(t, pull, `"pk": "8b6f1a52-3c1e-4f0a-9d2b-7e4c5a6b1c03"`)
	require.Contains(t, pull, `"op": "upsert"`)
	require.Contains(t, pull, `"title": "Try Synchro"`)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, "synchro dev stops cleanly on interrupt")
	case <-time.After(60 * time.Second):
		t.Fatal("synchro dev did not stop")
	}
}

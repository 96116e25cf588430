package main

// Command-line edges found by an independent review (2026-12-05, twenty-fourth
// session); each was red before its fix.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An explicitly empty --slot, --publication, --decoder or --listen (a deploy's
// `--slot "$SLOT"` with the variable unset) fails closed like every other bad value.
// It fell back to the default ("synchro", "pgoutput"), and --listen "" served the
// probes and /metrics on every interface at a random port. An address without a port
// is refused too; ":8080" (every interface) stays allowed.
func TestCLIRunRejectsEmptyStringFlags(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=1", closedPort(t))
	for _, bad := range [][2]string{{"--slot", ""}, {"--publication", ""}, {"--decoder", ""}, {"--listen", ""}, {"--listen", "127.0.0.1"}} {
		t.Run(strings.TrimPrefix(bad[0], "--")+"="+bad[1], func(t *testing.T) {
			t.Parallel()
			args := []string{"run", "--database-url", url, "--listen", "127.0.0.1:0", bad[0], bad[1]}
			code, early, out := runWithin(t, 3*time.Second, args...)
			require.True(t, early && code != 0,
				"synchro run %s %q was accepted (the runner started; exit %d once stopped):\n%s", bad[0], bad[1], code, out)
			require.Contains(t, out, bad[0])
		})
	}
}

// The quick start interrupted during its first initdb (Ctrl-C or SIGTERM a second or
// two after `synchro dev`): initdb is killed (exec.CommandContext's SIGKILL) and left a
// data directory that had PG_VERSION but no complete cluster, which the next `synchro
// dev` with the same --dir reused and could not start. initdb runs in a directory of
// its own now (data.initdb), renamed to data once it succeeded.
func TestDevInterruptedInitdbThenRerun(t *testing.T) {
	t.Parallel()
	parent, err := os.MkdirTemp("", "synchro-dev-initdb-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	dir := filepath.Join(parent, "dev")

	ctx, cancel := context.WithCancel(context.Background())
	e, out := reviewEnv()
	done := make(chan int, 1)
	go func() { done <- run(ctx, e, []string{"dev", "--dir", dir, "--port", "0", "--listen", "127.0.0.1:0"}) }()
	require.Eventually(t, func() bool { // initdb is halfway
		_, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION"))
		_, err2 := os.Stat(filepath.Join(dir, "data.initdb", "PG_VERSION"))
		return err == nil || err2 == nil
	}, 60*time.Second, time.Millisecond)
	cancel()
	select {
	case code := <-done:
		t.Logf("interrupted dev: exit %d\n%s", code, out.String())
	case <-time.After(60 * time.Second):
		t.Fatal("synchro dev did not stop")
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	e2, out2 := reviewEnv()
	done2 := make(chan int, 1)
	go func() {
		done2 <- run(ctx2, e2, []string{"dev", "--dir", dir, "--port", "0", "--listen", "127.0.0.1:0"})
	}()
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(out2.String(), "Try it in psql") {
		select {
		case code := <-done2:
			t.Fatalf("synchro dev after an interrupted first start: exit %d\n%s", code, out2.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "not ready:\n%s", out2.String())
		time.Sleep(50 * time.Millisecond)
	}
	cancel2()
	<-done2
}

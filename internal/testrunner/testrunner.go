// Package testrunner runs the WAL runner in-process for tests outside package tests
// (consumer, examples): the real runner on a testdb database, stopped when the test
// ends.
package testrunner

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

// Start runs a runner for db until the test ends and waits for its first start (the
// slot and the baseline).
func Start(t testing.TB, db *testdb.DB) {
	t.Helper()
	slot := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	r, err := runner.New(runner.Config{
		DatabaseURL:     db.URL,
		Slot:            slot,
		Owner:           "testrunner",
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		StandbyInterval: time.Second,
		IdleInterval:    50 * time.Millisecond,
		PollInterval:    10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("runner: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("runner did not stop")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM synchro.progress`).Scan(&n)
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner did not start the stream within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

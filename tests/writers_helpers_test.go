package tests

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/synchro/synchro/tests/testdb"
)

// writers runs statements from numbered goroutines until stopped: the background
// load of the tests that change the registry, bootstrap or reset while the
// application keeps writing.
type writers struct {
	stop     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
	attempts atomic.Int64
}

// startWriters starts n goroutines that each run sql(i) for i = 1, 2, … (shared
// among them), pausing between statements, until Stop. A statement failing with
// one of the SQLSTATEs of retry is skipped (deadlocks against the activation's
// trigger DDL, serialization failures); any other error fails the test and ends
// that goroutine. Stop is registered as a cleanup too, so a failing require never
// leaves them writing.
func startWriters(t *testing.T, db *testdb.DB, n int, pause time.Duration, retry []string, sql func(i int64) string) *writers {
	t.Helper()
	w := &writers{stop: make(chan struct{})}
	t.Cleanup(w.Stop)
	for range n {
		w.wg.Go(func() {
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				i := w.attempts.Add(1)
				if _, err := db.Pool.Exec(context.Background(), sql(i)); err != nil {
					if pe := asPgError(err); pe != nil && slices.Contains(retry, pe.Code) {
						continue
					}
					t.Errorf("writer: %v", err)
					return
				}
				time.Sleep(pause)
			}
		})
	}
	return w
}

// Stop ends the writers and waits for them; it may be called more than once.
func (w *writers) Stop() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// Attempts is how many statements were started (retried ones included).
func (w *writers) Attempts() int64 { return w.attempts.Load() }

// startScopes rebuilds each scope for one client: the replicas and their cursors.
func startScopes(t *testing.T, db *testdb.DB, clientID string, scopes []string) (map[string]replica, map[string]string) {
	t.Helper()
	reps := map[string]replica{}
	curs := map[string]string{}
	for _, s := range scopes {
		reps[s], curs[s] = startScope(t, db, clientID, s)
	}
	return reps, curs
}

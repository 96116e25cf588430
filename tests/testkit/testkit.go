// Package testkit holds the helpers of the test packages that start a private cluster
// of their own (tests/lostslot, tests/restart, tests/restore, tests/resetvisible): a
// log sink a runner writes to while the test reads it, a bounded wait, and the slot
// name a database's stream uses.
package testkit

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncLog is an io.Writer that a runner's logger writes to from its goroutines while
// the test reads what was written.
type SyncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *SyncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *SyncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines are the lines written so far that contain substr.
func (l *SyncLog) Lines(substr string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// WaitFor polls cond every poll until it holds, and fails the test after timeout.
func WaitFor(t testing.TB, timeout, poll time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(poll)
	}
}

var nonSlotChars = regexp.MustCompile(`[^a-z0-9_]`)

// SlotName is a replication slot name for a test database: its name in the
// characters a slot name allows, at most 63 of them (the end, which is unique).
func SlotName(dbName string) string {
	slot := nonSlotChars.ReplaceAllString(strings.ToLower(dbName), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	return slot
}

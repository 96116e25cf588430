package runner

import "sync"

// byteBudget bounds the bytes of payloads the reader has handed to the applier and
// the applier has not taken yet. A payload is admitted while the buffered bytes
// plus its own stay within max, or when nothing is buffered: one payload larger
// than the bound passes alone, so no transaction can deadlock the session.
type byteBudget struct {
	max     int64
	mu      sync.Mutex
	used    int64
	freed   chan struct{} // a hint, capacity 1: bytes were released
	metrics *Metrics
}

func newByteBudget(max int64, m *Metrics) *byteBudget {
	return &byteBudget{max: max, freed: make(chan struct{}, 1), metrics: m}
}

// tryAcquire reserves n bytes if the bound allows it now.
func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used > 0 && b.used+n > b.max {
		return false
	}
	b.used += n
	b.metrics.buffered(b.used)
	return true
}

// release returns n bytes and wakes a reader waiting for them.
func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.metrics.buffered(b.used)
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

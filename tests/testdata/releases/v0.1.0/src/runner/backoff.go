package runner

import (
	"context"
	"time"
)

// backoff is a bounded exponential delay: min, 2·min, 4·min, … up to max.
type backoff struct {
	min, max time.Duration
	next     time.Duration
}

func newBackoff(minDelay, maxDelay time.Duration) *backoff {
	return &backoff{min: minDelay, max: maxDelay, next: minDelay}
}

// Delay returns the next delay and doubles the one after it, up to max.
func (b *backoff) Delay() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	return d
}

// Reset starts again from min after a success.
func (b *backoff) Reset() { b.next = b.min }

// sleep waits d or until ctx is done; it reports whether the full delay passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

package runner

import (
	"sync"

	"github.com/jackc/pglogrepl"
)

// Frontier is the acknowledgement state machine of one replication session
// (ADR 001, "Slot acknowledgement"). Its boundaries only move forward and keep
//
//	recorded <= sent <= durable
//
// durable is the processed boundary that a committed materialization (or a
// recorded idle boundary) made durable; sent is what the slot was told in a
// standby status update; recorded is the acknowledgement recorded with
// runner_ack after pg_replication_slots showed the slot there. Nothing received
// but not durably materialized ever enters it. Safe for concurrent use.
type Frontier struct {
	mu       sync.Mutex
	durable  pglogrepl.LSN
	sent     pglogrepl.LSN
	recorded pglogrepl.LSN
	idle     pglogrepl.LSN // best idle boundary offered and not yet taken
	poisoned bool
}

// NewFrontier starts a session from durable progress: processed is
// processed_end_lsn and ack the acknowledged_end_lsn (generation_start when
// NULL), which the slot equals when the session starts.
func NewFrontier(processed, ack pglogrepl.LSN) *Frontier {
	return &Frontier{durable: max(processed, ack), sent: ack, recorded: ack}
}

// Durable is the boundary to report in standby status updates.
func (f *Frontier) Durable() pglogrepl.LSN {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.durable
}

// Snapshot returns all three boundaries.
func (f *Frontier) Snapshot() (durable, sent, recorded pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.durable, f.sent, f.recorded
}

// Materialized records that a transaction ending at end (or an idle boundary
// returned by runner_idle) is durable. It reports whether durable advanced.
func (f *Frontier) Materialized(end pglogrepl.LSN) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if end <= f.durable {
		return false
	}
	f.durable = end
	return true
}

// Poisoned blocks idle boundaries for the rest of the session: an active poison
// keeps acknowledgement at the prior contiguous boundary.
func (f *Frontier) Poisoned() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.poisoned = true
	f.idle = 0
}

// OfferIdle offers a keepalive's server WAL end as an idle boundary. The caller
// offers it in stream order, after everything received before the keepalive was
// handed to the applier.
func (f *Frontier) OfferIdle(walEnd pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.poisoned && walEnd > f.idle {
		f.idle = walEnd
	}
}

// TakeIdle returns the idle boundary to record, if one may be recorded now: no
// source transaction is open (inTxn false, and everything received before the
// keepalive has been materialized, which in-order delivery guarantees), no
// poison is active, and it is after the durable boundary.
func (f *Frontier) TakeIdle(inTxn bool) (pglogrepl.LSN, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if inTxn || f.poisoned || f.idle <= f.durable {
		return 0, false
	}
	b := f.idle
	f.idle = 0
	return b, true
}

// Sent records that a standby status update reported b (which must be a value
// Durable returned).
func (f *Frontier) Sent(b pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b > f.sent && b <= f.durable {
		f.sent = b
	}
}

// Unsent reports whether the durable boundary is ahead of the last status update.
func (f *Frontier) Unsent() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.durable > f.sent
}

// Unrecorded reports whether a sent boundary still waits for its runner_ack.
func (f *Frontier) Unrecorded() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent > f.recorded
}

// ToRecord returns the acknowledgement to record now that the slot's
// confirmed_flush_lsn is confirmed: the slot position itself when it is after
// the recorded acknowledgement and not beyond what this runner sent. A slot
// beyond what was sent was moved by someone else and is never adopted here.
func (f *Frontier) ToRecord(confirmed pglogrepl.LSN) (pglogrepl.LSN, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if confirmed <= f.recorded || confirmed > f.sent {
		return 0, false
	}
	return confirmed, true
}

// Recorded records that runner_ack(b) committed.
func (f *Frontier) Recorded(b pglogrepl.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b > f.recorded && b <= f.sent {
		f.recorded = b
	}
}

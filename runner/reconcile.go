package runner

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// ErrSlotMismatch is returned (wrapped) when the slot position contradicts
// durable progress in a way startup reconciliation must not repair.
var ErrSlotMismatch = errors.New("synchro: replication slot position contradicts durable progress")

// Progress is the durable stream state from synchro.runner_state().
type Progress struct {
	StreamGeneration   int64
	SlotName           string
	GenerationStart    pglogrepl.LSN
	MaterializedCommit pglogrepl.LSN // 0 = generation_start
	ProcessedEnd       pglogrepl.LSN
	AcknowledgedEnd    pglogrepl.LSN // 0 when NULL; use Ack()
	RegistryGeneration int64
	PoisonCommit       pglogrepl.LSN // 0 = no active poison
	PoisonClass        string
	RetryRequested     bool
	RetrySeq           int64  // retry requests made for the poison: runner_poison's attempt_seq
	Plugin             string // the output plugin the stream records
}

// Ack is the acknowledged boundary: acknowledged_end_lsn, or generation_start
// when NULL.
func (p Progress) Ack() pglogrepl.LSN {
	if p.AcknowledgedEnd == 0 {
		return p.GenerationStart
	}
	return p.AcknowledgedEnd
}

// Poisoned reports whether a blocking quarantine is active.
func (p Progress) Poisoned() bool { return p.PoisonClass != "" || p.PoisonCommit != 0 }

// SlotAction is what startup reconciliation does with the slot.
type SlotAction uint8

// Slot actions.
const (
	// SlotInSync: the slot equals the durable acknowledgement.
	SlotInSync SlotAction = iota + 1
	// SlotAdvance: the slot is behind the acknowledgement (a slot advance is not
	// durable across a crash); advance it to the acknowledgement.
	SlotAdvance
	// SlotAdopt: the slot is after the acknowledgement and at or before the
	// processed boundary (death between slot advance and runner_ack); record it.
	SlotAdopt
)

func (a SlotAction) String() string {
	switch a {
	case SlotInSync:
		return "in_sync"
	case SlotAdvance:
		return "advance"
	case SlotAdopt:
		return "adopt"
	}
	return "invalid"
}

// Reconcile decides, from the slot's confirmed_flush_lsn and durable progress,
// what must happen before WAL may be read (ADR 001, "Slot acknowledgement").
// The target is the LSN to advance to (SlotAdvance) or to record (SlotAdopt).
func Reconcile(slot pglogrepl.LSN, p Progress) (SlotAction, pglogrepl.LSN, error) {
	ack := p.Ack()
	switch {
	case slot < p.GenerationStart:
		return 0, 0, fmt.Errorf("%w: slot %s is before generation start %s", ErrSlotMismatch, slot, p.GenerationStart)
	case slot > p.ProcessedEnd:
		return 0, 0, fmt.Errorf("%w: slot %s is after the processed boundary %s", ErrSlotMismatch, slot, p.ProcessedEnd)
	case slot < ack:
		return SlotAdvance, ack, nil
	case slot > ack:
		return SlotAdopt, slot, nil
	}
	return SlotInSync, slot, nil
}

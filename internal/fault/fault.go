// Package fault names the runner's fault points: places where a test kills the
// `synchro run` process on purpose, to prove that no crash loses, duplicates or
// reorders work.
//
// The points are reached deterministically through a test-only switch. Built with
// the tag synchrofaults (`go build -tags synchrofaults ./cmd/synchro`), the runner
// reads SYNCHRO_FAULT=point:n and kills its own process with SIGKILL the n-th time it
// reaches that point: a real death, no deferred function runs, no connection is
// closed, nothing is released. Without the tag (every production build) Injector is
// an empty struct, FromEnv returns nil and Reach does nothing: the binary carries no
// hook, and no configuration or environment variable can arm one.
package fault

import (
	"fmt"
	"strconv"
	"strings"
)

// Env is the variable a test build reads: "point:n" (n ≥ 1; "point" alone is n = 1).
const Env = "SYNCHRO_FAULT"

// Point is a named fault point.
type Point string

// The fault points, in the order a source transaction meets them.
const (
	// SlotCreated: the first start created the slot with its exported snapshot and
	// has not materialized the baseline yet.
	SlotCreated Point = "slot-created"
	// Baseline: the baseline of a first start ran inside its transaction under the
	// exported snapshot, not yet committed.
	Baseline Point = "baseline"
	// Reconcile: startup reconciliation just advanced the slot to the durable
	// acknowledgement, or recorded an adopted slot position, and has not read
	// durable progress again.
	Reconcile Point = "reconcile"
	// Decode: a replication payload was decoded and its messages have not reached
	// the collator (inside a source transaction for most payloads).
	Decode Point = "decode"
	// Copy: a COPY of staged rows into the materialization batch is under way:
	// half of its rows were handed to the protocol.
	Copy Point = "copy"
	// BeforeCommit: synchro.materialize_batch returned, the materialization
	// transaction is not committed.
	BeforeCommit Point = "before-commit"
	// Prepared: a pipelined batch committed what it prepared
	// (synchro.materialize_prepare) and now waits for the batch before it, which
	// has not committed.
	Prepared Point = "prepared"
	// AfterCommit: the materialization transaction committed; its boundary was not
	// reported to the slot.
	AfterCommit Point = "after-commit"
	// Idle: an idle boundary was recorded (runner_idle) and not reported to the slot.
	Idle Point = "idle"
	// StatusSent: a standby status update carrying the durable boundary went out to
	// the walsender (the slot may or may not have taken it).
	StatusSent Point = "status-sent"
	// AfterSlotAck: the slot showed a boundary as confirmed; the acknowledgement
	// was not recorded (runner_ack).
	AfterSlotAck Point = "after-slot-ack"
	// BootstrapStaging: a projection bootstrap's rows are staged inside the
	// transaction that imported the exported snapshot, not committed (the slot's
	// replication connection is still open).
	BootstrapStaging Point = "bootstrap-staging"
	// BootstrapStaged: a projection bootstrap's stage committed; the main worker
	// has not merged it.
	BootstrapStaged Point = "bootstrap-staged"
)

// Points lists every fault point.
var Points = []Point{SlotCreated, Baseline, Reconcile, Decode, Copy, Prepared, BeforeCommit, AfterCommit, Idle, StatusSent,
	AfterSlotAck, BootstrapStaging, BootstrapStaged}

// Spec is a parsed SYNCHRO_FAULT value.
type Spec struct {
	Point Point
	N     int64 // die at the N-th reach (1-based)
}

// String renders s as SYNCHRO_FAULT takes it.
func (s Spec) String() string { return fmt.Sprintf("%s:%d", s.Point, s.N) }

// Parse reads "point:n" or "point".
func Parse(v string) (Spec, error) {
	name, count, found := strings.Cut(strings.TrimSpace(v), ":")
	s := Spec{Point: Point(name), N: 1}
	if found {
		n, err := strconv.ParseInt(count, 10, 64)
		if err != nil || n < 1 {
			return s, fmt.Errorf("fault: %s=%q: the count must be a positive integer", Env, v)
		}
		s.N = n
	}
	for _, p := range Points {
		if p == s.Point {
			return s, nil
		}
	}
	return s, fmt.Errorf("fault: %s=%q: unknown fault point %q", Env, v, name)
}

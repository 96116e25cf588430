package runner

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"time"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner/decode/pgoutput"
)

// Config configures a Runner. Zero durations take their defaults.
type Config struct {
	// DatabaseURL is the Synchro database. Its role needs synchro_runner and
	// REPLICATION. Never logged with its password.
	DatabaseURL string
	// Slot is the logical replication slot (default "synchro"),
	// ^[a-z0-9_]{1,63}$ as PostgreSQL requires.
	Slot string
	// Publication is the publication the registry keeps (default "synchro").
	Publication string
	// Decoder is the output plugin the stream is decoded with: "pgoutput"
	// (default) or "wal2json" (docs/decoders.md). The stream records its
	// plugin at creation; a runner with another one is refused at start.
	Decoder string
	// Owner names this runner in synchro.runner (default: the host name).
	Owner string

	// HeartbeatInterval between runner_heartbeat calls (default 5s).
	HeartbeatInterval time.Duration
	// StandbyInterval between unprompted standby status updates, each asking
	// the server for a reply (default 10s). Keep it well under the server's
	// wal_sender_timeout.
	StandbyInterval time.Duration
	// ReceiveTimeout: a replication connection that delivers nothing for this
	// long is dead (default 3 × StandbyInterval), unless the server says its
	// walsender is decoding (reader.decoding).
	ReceiveTimeout time.Duration
	// IdleInterval is the least time between two idle acknowledgements
	// (default 1s): recording one writes WAL, which brings another keepalive.
	IdleInterval time.Duration
	// PollInterval for the slot position after a status update and for
	// runner_state while a poison blocks the stream (default 100ms).
	PollInterval time.Duration
	// BackoffMin and BackoffMax bound the exponential backoff after a transient
	// failure (defaults 100ms and 10s).
	BackoffMin, BackoffMax time.Duration
	// BatchRows is the most staged rows per COPY (default 1000) while no
	// materialization call is in flight (BatchBytes bounds them otherwise).
	BatchRows int
	// BatchTxns is the most source transactions materialized in one database
	// transaction (default 1000). A batch also closes as soon as nothing more is
	// buffered, so at low load it holds one transaction.
	BatchTxns int
	// BatchEvents closes a batch once it holds this many row events (default
	// 5000). A single larger source transaction is still one batch. With pipelined
	// batches, smaller ones overlap more: a backlog of 49 1,000-row transactions
	// in batches of 20,000 events is three batches, of which only the last two can
	// be prepared beside the one before (docs/benchmarks.md, eleventh session).
	BatchEvents int
	// BatchDelay closes a batch that has been open this long while source
	// transactions keep arriving (default 100ms). A batch closes earlier, once it
	// has been open as long as the last materialization call took, and while the
	// previous batch's call is in flight it closes when that call returns.
	BatchDelay time.Duration
	// ApplySessions is how many apply connections materialize batches: 2 (the
	// default) pipelines them, so that batch N+1's COPY, relation checks, fence
	// pairing and row images (synchro.materialize_prepare) overlap batch N's
	// writes, and records acknowledgements on a connection of its own; 1
	// materializes each batch in one call (synchro.materialize_batch) on one
	// connection. Commit order and every outcome are the same either way.
	ApplySessions int
	// PerTransaction materializes every source transaction alone through the
	// reference per-transaction path (synchro._materialize_txn), never set-based:
	// for comparison tests and diagnosis. Much slower.
	PerTransaction bool
	// BatchBytes bounds a COPY batch of staged rows by their row data (default
	// 8 MiB): a batch is sent once it reaches this many bytes, so it holds at most
	// this plus the row that crossed it (a row larger than the bound goes alone).
	// While the previous batch's materialization call is in flight, staged rows
	// stay in memory up to this bound (BatchRows does not send them: the COPY
	// would wait for the call), so the bound on the runner's memory is unchanged.
	BatchBytes int64
	// BufferBytes bounds the replication payloads received and not yet taken by
	// materialization (default 64 MiB), next to the count bound of 4,096
	// payloads. A payload larger than the bound is admitted alone, when nothing
	// else is buffered. The runner's memory is about BufferBytes + BatchBytes +
	// a few times the largest payload.
	BufferBytes int64
	// LivenessTimeout: a running loop (session, reader, applier, heartbeat)
	// that has made no progress for this long is stuck and /livez answers 503
	// (default 2 × the longest of ReceiveTimeout, BackoffMax and
	// HeartbeatInterval). Must exceed StandbyInterval,
	// HeartbeatInterval and BackoffMax, the longest a healthy loop waits.
	LivenessTimeout time.Duration
	// MetricsInterval between two refreshes of the database-side gauges (lag,
	// retained WAL, heartbeat age, poison) from synchro.readiness() and
	// pg_replication_slots (default 5s). Only with Metrics set.
	MetricsInterval time.Duration
	// ShutdownTimeout bounds the drain after a stop: finishing the transaction
	// in hand and acknowledging it (default 60s).
	ShutdownTimeout time.Duration

	// Logger gets structured logs without row values or passwords (default:
	// slog.Default()).
	Logger *slog.Logger
	// Metrics is updated when set.
	Metrics *Metrics

	// faults: the fault points armed by SYNCHRO_FAULT in a build with the
	// synchrofaults tag (internal/fault); always nil in production builds.
	faults *fault.Injector
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// withDefaults validates c and fills in defaults.
func (c Config) withDefaults() (Config, error) {
	if c.DatabaseURL == "" {
		return c, errors.New("synchro: runner: no database URL")
	}
	if c.Slot == "" {
		c.Slot = "synchro"
	}
	if !slotName.MatchString(c.Slot) {
		return c, fmt.Errorf("synchro: runner: slot name %q: want ^[a-z0-9_]{1,63}$", c.Slot)
	}
	if c.Publication == "" {
		c.Publication = "synchro"
	}
	if c.Decoder == "" {
		c.Decoder = pgoutput.Name
	}
	if _, err := PluginFor(c.Decoder); err != nil {
		return c, err
	}
	if c.Owner == "" {
		c.Owner, _ = os.Hostname()
		if c.Owner == "" {
			c.Owner = "synchro"
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatInterval, 5*time.Second)
	def(&c.StandbyInterval, 10*time.Second)
	def(&c.ReceiveTimeout, 3*c.StandbyInterval)
	def(&c.IdleInterval, time.Second)
	def(&c.PollInterval, 100*time.Millisecond)
	def(&c.BackoffMin, 100*time.Millisecond)
	def(&c.BackoffMax, 10*time.Second)
	def(&c.ShutdownTimeout, 60*time.Second)
	def(&c.LivenessTimeout, 2*max(c.ReceiveTimeout, c.BackoffMax, c.HeartbeatInterval))
	def(&c.MetricsInterval, 5*time.Second)
	if c.LivenessTimeout <= max(c.StandbyInterval, c.HeartbeatInterval, c.BackoffMax) {
		return c, errors.New("synchro: runner: LivenessTimeout must exceed StandbyInterval, HeartbeatInterval and BackoffMax")
	}
	if c.ReceiveTimeout <= c.StandbyInterval {
		return c, errors.New("synchro: runner: ReceiveTimeout must exceed StandbyInterval")
	}
	if c.BatchRows <= 0 {
		c.BatchRows = 1000
	}
	switch {
	case c.ApplySessions == 0:
		c.ApplySessions = 2
	case c.ApplySessions < 0 || c.ApplySessions > 2:
		return c, fmt.Errorf("synchro: runner: ApplySessions must be 1 or 2, not %d", c.ApplySessions)
	}
	if c.BatchTxns <= 0 {
		c.BatchTxns = 1000
	}
	if c.BatchEvents <= 0 {
		c.BatchEvents = 5000
	}
	def(&c.BatchDelay, 100*time.Millisecond)
	if c.BatchBytes <= 0 {
		c.BatchBytes = 8 << 20
	}
	if c.BufferBytes <= 0 {
		c.BufferBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	f, err := fault.FromEnv()
	if err != nil {
		return c, err
	}
	c.faults = f
	return c, nil
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner/decode"
)

// errBlocked: a poison blocks the stream and no retry is requested.
var errBlocked = errors.New("synchro: stream blocked by a poison transaction")

// errSlotActive: the slot is still held by another walsender (typically the
// previous session's, still exiting).
var errSlotActive = errors.New("synchro: replication slot is still active")

// finalAckBudget bounds the wait for the slot to confirm the last boundary
// when a session ends cleanly or on a poison.
const finalAckBudget = 5 * time.Second

// session runs one replication session: reconcile the slot with durable
// progress, start replication at the durable acknowledgement, then read and
// apply concurrently until a clean stop (nil), a poison (*PoisonError) or a
// failure.
func (r *Runner) session(work, stop context.Context) error {
	apply, err := connect(work, r.cfg.DatabaseURL, "synchro-runner-apply", applyParams[:]...)
	if err != nil {
		return err
	}
	defer closeQuietly(work, apply)
	r.live.beat(LoopSession)

	st, err := r.reconcile(work, apply)
	if err != nil {
		return err
	}
	if err := OpenStage(work, apply); err != nil {
		return err
	}
	key, err := loadMessageKey(work, apply)
	if err != nil {
		return err
	}

	repl, err := connectReplication(work, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer closeReplication(work, repl)
	dec, err := r.plugin.Open(work, apply, decode.SessionSpec{
		Publication: r.cfg.Publication, RegistryGeneration: st.RegistryGeneration, RestartedAt: r.restartedAt,
		Authentic: key.VerifyActivation})
	if err != nil {
		if v := Classify(err); v.Disposition == Fatal {
			return &fatalError{err: fmt.Errorf("synchro: fatal: decoder %s: %w", r.cfg.Decoder, err)}
		}
		return err
	}
	start := st.Ack()
	slotName, err := r.streamSlot(st)
	if err != nil {
		return err
	}
	err = pglogrepl.StartReplication(work, repl, slotName, start,
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: dec.StartOptions()})
	if err != nil {
		return r.startRefusal(err)
	}
	// The slot was checked against durable progress before this session held it
	// (reconcile); in between, anyone with the replication privilege could advance
	// it, and START_REPLICATION then silently decodes from the slot's position, not
	// from start: the transactions in between would be skipped. Now that this session
	// holds the slot (nobody else can move it) and before it reports any position,
	// the slot must still be exactly where reconcile left it (ADR 001: a slot after
	// the processed boundary is rejected; TestAckEdgeSlotAdvancedAfterReconcileIsRefused).
	if held, err := slotPosition(work, apply, slotName); err != nil {
		return err
	} else if held.ConfirmedFlush != start {
		return &fatalError{err: fmt.Errorf("%w: slot %s moved to %s while the session started at the acknowledgement %s",
			ErrSlotMismatch, slotName, held.ConfirmedFlush, start)}
	}
	var syncCommit string
	if err := apply.QueryRow(work, `SELECT pg_catalog.current_setting('synchronous_commit')`).Scan(&syncCommit); err != nil {
		return err
	}
	r.log.Info("replication started", "stream_generation", st.StreamGeneration,
		"start_lsn", start, "processed_end_lsn", st.ProcessedEnd, "retry", st.Poisoned(),
		"synchronous_commit", syncCommit)
	r.setState(stateStreaming)
	if r.sessions.Add(1) > 1 {
		r.cfg.Metrics.reconnected()
	}

	frontier := NewFrontier(st.ProcessedEnd, start)
	items := make(chan item, itemBuffer)
	budget := newByteBudget(r.cfg.BufferBytes, r.cfg.Metrics)
	rd := newReader(&r.cfg, repl, frontier, items, budget, stop, &r.received)
	rd.boundary = dec.Boundary
	rd.decoding = walsenderDecoding(r.cfg.DatabaseURL, repl.PID(), r.cfg.ReceiveTimeout)
	ap := newApplier(&r.cfg, r.log, apply, st.StreamGeneration, frontier, rd.wake, r.serialUntil, key)
	ap.retrySeq = st.RetrySeq
	pipelined := r.cfg.ApplySessions > 1
	if pipelined {
		// A pack older than this runner (not migrated yet) has no pipelined halves:
		// one apply session until it is, rather than a failed batch each time.
		var ok bool
		if err := apply.QueryRow(work, `SELECT pg_catalog.to_regprocedure('synchro.materialize_write(bigint, bigint, '
			|| 'pg_lsn[], pg_lsn[], bigint[], timestamptz[])') IS NOT NULL`).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			pipelined = false
			r.log.Warn("the pack is older than this runner: one apply session until `synchro migrate up`")
		}
	}
	if pipelined {
		// The second apply connection, with staging tables of its own, and the
		// acknowledgement's (applier: pipelined batches).
		second, err := connect(work, r.cfg.DatabaseURL, "synchro-runner-apply", applyParams[:]...)
		if err != nil {
			return err
		}
		defer closeQuietly(work, second)
		if err := OpenStage(work, second); err != nil {
			return err
		}
		ackConn, err := connect(work, r.cfg.DatabaseURL, "synchro-runner-ack")
		if err != nil {
			return err
		}
		defer closeQuietly(work, ackConn)
		ap.pipeline(second, ackConn)
		r.live.applyPID2.Store(second.PgConn().PID())
		defer r.live.applyPID2.Store(0)
	}
	ap.dec = dec
	ap.budget = budget
	ap.slot = slotName
	if err := ap.loadRegistered(work, apply, nil, nil); err != nil {
		return err
	}
	// While the session streams, the reader and the applier are watched, not the
	// session loop.
	rd.live, ap.live = &r.live, &r.live
	r.live.applyPID.Store(apply.PgConn().PID())
	r.live.beat(LoopReader)
	r.live.beat(LoopApplier)
	r.live.idle(LoopSession)
	g, gctx := errgroup.WithContext(work)
	g.Go(func() error { defer r.live.idle(LoopReader); return rd.run(gctx) })
	g.Go(func() error { defer r.live.idle(LoopApplier); return ap.run(gctx, stop, items) })
	err = g.Wait()
	r.live.applyPID.Store(0)
	r.live.beat(LoopSession)
	if errors.Is(err, errStopped) {
		err = nil
	}

	var pe *PoisonError
	if err == nil || errors.As(err, &pe) {
		// The reader is gone: the connection is ours again. Report and record
		// the durable boundary (never past a poison).
		if ferr := r.finalAck(work, rd, ap, frontier); ferr != nil {
			r.log.Warn("final acknowledgement incomplete", "err", ferr)
		}
	}
	return err
}

// startRefusal wraps a failed START_REPLICATION. The output plugin checks the
// options in its startup callback, before the stream starts: one it does not know
// or support (22023 invalid_parameter_value, 0A000 feature_not_supported: a wal2json
// build without an option the decoder sends, after a server package changed under a
// stream the start-up probe no longer checks) is a capability the server lacks, fatal
// like the probe's refusal, never a retry loop that only looks alive.
func (r *Runner) startRefusal(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "22023" || pgErr.Code == "0A000") {
		return &fatalError{err: fmt.Errorf("synchro: fatal: decoder %s: %w: %w", r.cfg.Decoder,
			decode.NewError(decode.ClassCapabilityUnsupported, 0, "the server's output plugin refuses the replication options"), err)}
	}
	return fmt.Errorf("synchro: start replication: %w", err)
}

// reconcile applies ADR 001's startup rules on the apply connection and returns
// durable progress with the slot equal to its acknowledgement.
func (r *Runner) reconcile(ctx context.Context, conn *pgx.Conn) (Progress, error) {
	st, ok, err := readState(ctx, conn)
	if err != nil {
		return st, err
	}
	if !ok {
		return st, errors.New("synchro: no stream generation")
	}
	slotName, err := r.streamSlot(st)
	if err != nil {
		return st, err
	}
	if st.Poisoned() && !st.RetryRequested {
		return st, errBlocked
	}
	slot, err := slotPosition(ctx, conn, slotName)
	if err != nil {
		return st, err
	}
	if err := slotUsable(slot, slotName, r.plugin.Name()); err != nil {
		return st, err
	}
	if slot.Active {
		// Another walsender still holds the slot (the previous session's, exiting, or
		// a runner that lost its claim and has not noticed yet) and may still move it
		// and progress while this reads them one statement at a time: decide nothing
		// until it is released (a false ErrSlotMismatch otherwise:
		// TestAckEdgeClaimantRefusesSlotMovedByClaimlessRunner).
		return st, errSlotActive
	}
	found, err := gen.New(conn).PublicationExists(ctx, r.cfg.Publication)
	if err != nil {
		return st, fmt.Errorf("synchro: read publication: %w", err)
	}
	if !found {
		// Before the first activation there is nothing to stream and no
		// publication yet: wait for it. After it, the publication was dropped.
		cols, err := gen.New(conn).RunnerColumns(ctx, gen.RunnerColumnsParams{})
		if err != nil {
			return st, fmt.Errorf("synchro: runner_columns: %w", err)
		}
		if len(cols) == 0 {
			return st, errNoRegistry
		}
		return st, &fatalError{err: fmt.Errorf(
			"synchro: fatal: publication %q does not exist: the stream must be reset "+
				"(a publication created again stays invisible to the slot until it decodes past its creation)",
			r.cfg.Publication)}
	}
	action, target, err := Reconcile(slot.ConfirmedFlush, st)
	if err != nil {
		return st, &fatalError{err: err}
	}
	switch action {
	case SlotAdvance:
		r.log.Warn("slot behind the durable acknowledgement: advancing it", "slot_lsn", slot.ConfirmedFlush, "ack", target)
		if err := gen.New(conn).AdvanceReplicationSlot(ctx, gen.AdvanceReplicationSlotParams{
			SlotName: slotName, Upto: target.String()}); err != nil {
			return st, fmt.Errorf("synchro: advance slot: %w", err)
		}
	case SlotAdopt:
		r.log.Warn("slot after the durable acknowledgement: adopting it", "slot_lsn", slot.ConfirmedFlush, "ack", st.Ack())
		if err := gen.New(conn).RunnerAck(ctx, target.String()); err != nil {
			return st, fmt.Errorf("synchro: runner_ack: %w", err)
		}
		r.cfg.Metrics.acked(target)
	}
	if action != SlotInSync {
		r.cfg.faults.Reach(fault.Reconcile)
		if st, _, err = readState(ctx, conn); err != nil {
			return st, err
		}
		if slot, err = slotPosition(ctx, conn, slotName); err != nil {
			return st, err
		}
		if slot.ConfirmedFlush != st.Ack() {
			return st, fmt.Errorf("%w: slot %s, acknowledgement %s after reconciliation",
				ErrSlotMismatch, slot.ConfirmedFlush, st.Ack())
		}
	}
	return st, nil
}

// finalAck reports the durable boundary and records it once the slot shows it.
func (r *Runner) finalAck(ctx context.Context, rd *reader, ap *applier, f *Frontier) error {
	if f.Unsent() {
		if err := rd.sendStatus(ctx, false); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(finalAckBudget)
	for f.Unrecorded() {
		if err := ap.maybeRecordAck(ctx); err != nil {
			return err
		}
		if !f.Unrecorded() {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("synchro: slot did not confirm the final boundary in time")
		}
		if !sleep(ctx, r.cfg.PollInterval/4+time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// errNoRegistry: no relation is registered and active, so the publication does
// not exist yet; retried with backoff until synchro.activate_registry().
var errNoRegistry = errors.New("synchro: no active registry generation and no publication yet: waiting for synchro.activate_registry()")

// slotUsable decides whether the stream's slot can be read: it exists, with the
// stream's plugin (the runner's decoder, which the stream was checked to
// record), and its WAL is not lost. Each failure is fatal (the runner
// stops with one log line; readiness's slot check says why): retrying cannot
// bring the slot back, only an operator's reset can.
func slotUsable(s slotInfo, name, plugin string) error {
	switch {
	case !s.Exists:
		return errSlotMissing
	case s.Plugin != plugin:
		return &fatalError{err: fmt.Errorf(
			"synchro: fatal: replication slot %q uses output plugin %q, the stream needs %q", name, s.Plugin, plugin)}
	case s.WALStatus == "lost":
		return &fatalError{err: fmt.Errorf(
			"synchro: fatal: replication slot %q has lost WAL it needs (wal_status=lost, max_slot_wal_keep_size exceeded): "+
				"the stream must be reset", name)}
	}
	return nil
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/runner/collate"
	"github.com/synchro/synchro/runner/decode"
)

// The runner's part of an operator-authorized stream reset (ADR 001, "Causally
// Bound Projection Baseline And Stream Reset"; SQL: synchro.begin_reset and the
// runner_reset_* functions). While a reset is open the old stream is blocked
// (materialize_batch refuses it with SYR01), so the loop serves the reset instead
// of a session on the old slot, one phase per step:
//
//   - requested (or staging left by a dead process, whose exported snapshot died
//     with it): a new permanent candidate slot with an exported snapshot; the
//     creating replication connection stays open and idle until the REPEATABLE
//     READ baseline transaction imported the snapshot and staged the baseline.
//   - catching_up: the coordinator's marker transaction, then the candidate slot
//     from its confirmed position, staged and materialized by the ordinary code
//     into the staged state (runner_reset_materialize), through the marker
//     transaction's end: the activation barrier. The candidate is acknowledged
//     exactly to the barrier, then phase ready. A process death resumes from the
//     same slot (replays are recognized as duplicates); a missing slot starts a
//     new candidate.
//   - ready, failed: wait for the operator (activate_reset, abort_reset).
//   - activated, aborted: controlled cleanup of the slot that ended with the
//     reset, then the loop streams the active slot the durable pointer names.

// stateResetting: the runner serves a stream reset (synchro.runner.state).
const stateResetting heartbeatState = "resetting"

// resetBarrierAckBudget bounds the wait for the candidate slot to confirm the
// activation barrier over the replication connection; after it, the slot is
// advanced once the connection is closed.
const resetBarrierAckBudget = 5 * time.Second

// streamSlot is the slot a session reads: the durable active-slot pointer (the
// active stream generation's slot_name). Before any reset that is the configured
// slot, and a first generation on another slot is a misconfiguration; after a reset
// it names the activated candidate, which the runner follows at every loop.
func (r *Runner) streamSlot(st Progress) (string, error) {
	switch {
	case st.SlotName == "":
		return r.cfg.Slot, nil
	case st.SlotName != r.cfg.Slot && st.StreamGeneration <= 1:
		return "", &fatalError{err: fmt.Errorf("synchro: the active stream uses slot %q, configured %q", st.SlotName, r.cfg.Slot)}
	}
	return st.SlotName, nil
}

// resetState reads the reset the runner must serve, if any.
func (c *control) resetState(ctx context.Context) (gen.RunnerResetStateRow, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	row, err := gen.New(c.conn).RunnerResetState(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false, nil
	}
	if err != nil {
		return row, false, fmt.Errorf("synchro: runner_reset_state: %w", err)
	}
	return row, true, nil
}

// resetOpen reports whether a reset waits for the runner (for awaitRetry).
func (r *Runner) resetOpen(ctx context.Context) bool {
	_, ok, err := r.ctl.resetState(ctx)
	return err == nil && ok
}

// serveReset runs one phase of the reset in hand; handled is false when there
// is none (the loop then runs a session on the active slot).
//
// The candidate slot a reset creates and catches up from uses the runner's
// decoder (--decoder), whatever plugin the old stream used: a stream reset is
// how a stream switches decoders (docs/decoders.md). The reset records the
// candidate's plugin, and activation makes it the new stream generation's. A
// candidate of another plugin than the runner's is discarded and staged again
// while the reset is still staging or catching up.
func (r *Runner) serveReset(work, stop context.Context) (handled bool, err error) {
	rs, ok, err := r.ctl.resetState(work)
	if err != nil {
		if r.ctl.lost() {
			return true, fmt.Errorf("%w: %w", errControlLost, err)
		}
		return true, err
	}
	if !ok {
		return false, nil
	}
	r.setState(stateResetting)
	log := r.log.With("reset_id", rs.ResetID)
	conn, err := connect(work, r.cfg.DatabaseURL, "synchro-runner-reset", applyParams[:]...)
	if err != nil {
		return true, err
	}
	defer closeQuietly(work, conn)
	r.live.beat(LoopSession)

	switch rs.Phase {
	case "activated":
		// The activation is durable: the old slot goes, then the retired projections.
		if err := dropSlotIfIdle(work, conn, rs.RetiredSlot); err != nil {
			return true, err
		}
		if err := gen.New(conn).RunnerResetCleaned(work, rs.ResetID); err != nil {
			return true, fmt.Errorf("synchro: runner_reset_cleaned: %w", err)
		}
		log.Info("reset cleanup: old slot and projections retired", "retired_slot", rs.RetiredSlot)
		return true, nil
	case "aborted":
		if err := dropSlotIfIdle(work, conn, rs.CandidateSlot); err != nil {
			return true, err
		}
		if err := gen.New(conn).RunnerResetCleaned(work, rs.ResetID); err != nil {
			return true, fmt.Errorf("synchro: runner_reset_cleaned: %w", err)
		}
		log.Info("reset aborted: candidate slot dropped", "candidate_slot", rs.CandidateSlot)
		return true, nil
	case "requested":
		return true, r.resetStage(work, stop, conn, rs, log)
	case "staging":
		if rs.ConsistentPoint != "" {
			// The rows are staged (durable): index them, resuming where it stopped,
			// as long as the candidate slot is there to catch up from.
			s, err := slotPosition(work, conn, rs.CandidateSlot)
			if err != nil {
				return true, err
			}
			if s.Exists && s.Plugin == r.plugin.Name() && s.WALStatus != "lost" {
				return true, r.resetIndex(work, stop, conn, rs.ResetID, log)
			}
		}
		// A death before the rows were staged lost the exported snapshot.
		return true, r.resetStage(work, stop, conn, rs, log)
	case "catching_up":
		return true, r.resetCatchUp(work, stop, conn, rs, log)
	}
	// ready or failed: the operator decides.
	log.Info("reset waits for the operator", "phase", rs.Phase)
	if rs.Phase == "ready" {
		if s, err := slotPosition(work, conn, rs.CandidateSlot); err == nil && s.Exists && s.Plugin != r.plugin.Name() {
			log.Warn("the ready candidate slot uses another output plugin than this runner's decoder: "+
				"activation starts a stream this runner refuses (abort the reset and begin again to switch)",
				"candidate_plugin", s.Plugin, "decoder", r.plugin.Name())
		}
	}
	r.awaitResetChange(work, stop, rs)
	return true, nil
}

// awaitResetChange polls until the reset in hand changes phase or a stop.
func (r *Runner) awaitResetChange(work, stop context.Context, rs gen.RunnerResetStateRow) {
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.live.beat(LoopSession)
		cur, ok, err := r.ctl.resetState(work)
		if err == nil && (!ok || cur.ResetID != rs.ResetID || cur.Phase != rs.Phase) {
			return
		}
		if err != nil && r.ctl.lost() {
			return // the next step reports the lost control session
		}
		select {
		case <-stop.Done():
			return
		case <-work.Done():
			return
		case <-t.C:
		}
	}
}

// resetStage starts a new candidate: drops the earlier one's slot, creates the
// permanent candidate slot with an exported snapshot and stages the baseline
// under it while the creating connection stays open.
func (r *Runner) resetStage(ctx, stop context.Context, conn *pgx.Conn, rs gen.RunnerResetStateRow, log *slog.Logger) (err error) {
	if rs.CandidateSlot != "" {
		// A death in staging lost the snapshot: that candidate is discarded.
		if err := dropSlotIfIdle(ctx, conn, rs.CandidateSlot); err != nil {
			return err
		}
	}
	slot, err := gen.New(conn).RunnerResetCandidate(ctx, gen.RunnerResetCandidateParams{ResetID: rs.ResetID, Plugin: r.plugin.Name()})
	if err != nil {
		return fmt.Errorf("synchro: runner_reset_candidate: %w", err)
	}
	// Rows written past the fence have no version; the baseline refuses them. They get
	// one first, in committed chunks the candidate's snapshot then holds.
	if err := r.resetVersions(ctx, conn, rs.ResetID); err != nil {
		return r.resetFailure(ctx, conn, rs.ResetID, err)
	}
	repl, err := connectReplication(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer closeReplication(ctx, repl)
	// Creating the slot waits for every transaction running in the cluster, for as
	// long as the oldest one runs: a stop ends the wait. Nothing is lost then: the
	// candidate is recorded, and the next start drops it (above) and begins again.
	r.live.idle(LoopSession)
	sctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(stop, cancel)
	res, err := decode.CreateSlot(sctx, repl, r.plugin, slot)
	unhook()
	cancel()
	r.live.beat(LoopSession)
	if err != nil {
		if stop.Err() != nil && ctx.Err() == nil {
			log.Info("stopped while the candidate slot waited for running transactions", "candidate_slot", slot)
			return nil
		}
		return fmt.Errorf("synchro: create candidate slot: %w", err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("synchro: consistent point: %w", err)
	}
	if !snapshotName.MatchString(res.SnapshotName) {
		return errors.New("synchro: unexpected exported snapshot name")
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'"); err != nil {
		return fmt.Errorf("synchro: import snapshot: %w", err)
	}
	r.live.applyPID.Store(conn.PgConn().PID())
	r.live.beat(LoopApplier)
	r.live.idle(LoopSession)
	defer func() { r.live.applyPID.Store(0); r.live.idle(LoopApplier); r.live.beat(LoopSession) }()
	err = gen.New(tx).RunnerResetBaseline(ctx, gen.RunnerResetBaselineParams{
		ResetID: rs.ResetID, SlotName: slot, ConsistentPoint: cp.String()})
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		// The failed transaction ends first: resetFailure records the failure on the
		// same connection (inside the aborted transaction it failed with 25P02, and
		// the loop started a new candidate for ever: TestResetBaselineFailureIsRecorded).
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return r.resetFailure(ctx, conn, rs.ResetID, fmt.Errorf("synchro: stage reset baseline: %w", err))
	}
	log.Info("reset baseline rows staged under the candidate slot's snapshot", "candidate_slot", slot, "consistent_point", cp)
	// The snapshot is imported and used: the creating connection may go.
	closeReplication(ctx, repl)
	return r.resetIndex(ctx, stop, conn, rs.ResetID, log)
}

// resetVersions gives every registered row without a row version one
// (synchro.runner_reset_versions), chunk by chunk, as bootstrapVersions does: a
// chunk that meets a row a writer holds gives up at once and is tried again.
func (r *Runner) resetVersions(ctx context.Context, conn *pgx.Conn, resetID string) error {
	var afterRel *int64
	var after *string
	busy := 0
	for {
		r.live.beat(LoopSession)
		res, err := gen.New(conn).RunnerResetVersions(ctx, gen.RunnerResetVersionsParams{
			ResetID: resetID, AfterRelation: afterRel, After: after, Chunk: bootstrapVersionChunk})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") && busy < 1000 {
			busy++
			if !sleep(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("synchro: runner_reset_versions: %w", err)
		}
		if res.Done {
			return nil
		}
		rel, last := res.RelationID, res.Last
		afterRel, after = &rel, &last
	}
}

// resetChunk bounds the rows of one indexing or verification transaction: the
// staged tables hold the live names (and their locks) for that long.
const resetChunk = 5000

// resetIndex indexes the staged baseline rows in short transactions (rule values,
// then membership), resuming at the durable position; then phase catching_up.
func (r *Runner) resetIndex(ctx, stop context.Context, conn *pgx.Conn, resetID string, log *slog.Logger) error {
	for {
		r.live.beat(LoopSession)
		if stop.Err() != nil {
			return nil
		}
		done, err := gen.New(conn).RunnerResetIndex(ctx, gen.RunnerResetIndexParams{ResetID: resetID, Chunk: resetChunk})
		if err != nil {
			return r.resetFailure(ctx, conn, resetID, fmt.Errorf("synchro: runner_reset_index: %w", err))
		}
		if done {
			log.Info("reset baseline indexed: catching up from the candidate slot")
			return nil
		}
	}
}

// resetFailure records a blocking failure of staging or catch-up (phase
// failed); transient failures are returned for a retry.
func (r *Runner) resetFailure(ctx context.Context, conn *pgx.Conn, resetID string, err error) error {
	v := Classify(err)
	if v.Disposition == Transient || ctx.Err() != nil || isConnectFailure(err) {
		// A session that could not be opened fails the runner, not the reset.
		return err
	}
	// A deploy that migrated the pack past this runner's release while it served the
	// reset: the functions it calls changed under it (42883 and the like). The release
	// mismatch's failure, not the reset's: the runner waits for its replacement
	// instead of failing the reset for good (pack.go, as the quarantine's path does).
	if perr := checkPack(ctx, conn); perr != nil {
		return fmt.Errorf("%w (a reset failure with SQLSTATE %s not recorded)", perr, v.SQLState)
	}
	class := v.Class
	if class == "" {
		class = "reset_failed"
	}
	if len(class) > 48 {
		class = class[:48]
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "SY400" && r.resetMovedOn(ctx, conn, resetID) {
		// A refusal of a phase check: the operator aborted meanwhile (or the
		// reset moved on); the next step reads where it stands. Any other SY400
		// (a baseline's refusal) is the reset's failure: it was returned as if
		// the reset had moved on, and the loop started a new candidate for ever
		// (TestResetRecoversBypassedInsert).
		return nil
	}
	if ferr := gen.New(conn).RunnerResetFail(ctx, gen.RunnerResetFailParams{ResetID: resetID, FailureClass: class}); ferr != nil {
		return fmt.Errorf("synchro: runner_reset_fail: %w (after %w)", ferr, err)
	}
	r.log.Error("stream reset failed: the old stream stays blocked until abort_reset", "reset_id", resetID,
		"class", class, "sqlstate", v.SQLState)
	return nil
}

// resetMovedOn reports whether reset resetID is no longer open in a phase the
// runner works in (staging, catching_up): aborted, activated, or gone. An error
// reading it counts as moved on (the next loop reads it again).
func (r *Runner) resetMovedOn(ctx context.Context, conn *pgx.Conn, resetID string) bool {
	st, err := gen.New(conn).RunnerResetState(ctx)
	if err != nil || st.ResetID != resetID {
		return true // no row (nothing open), an error, or another reset
	}
	return st.Phase != "staging" && st.Phase != "catching_up"
}

// resetCatchUp consumes the candidate slot into the staged state through the
// activation barrier, acknowledges the candidate exactly to the barrier and
// moves the reset to phase ready.
func (r *Runner) resetCatchUp(work, stop context.Context, conn *pgx.Conn, rs gen.RunnerResetStateRow, log *slog.Logger) error {
	s, err := slotPosition(work, conn, rs.CandidateSlot)
	if err != nil {
		return err
	}
	if !s.Exists || s.Plugin != r.plugin.Name() || s.WALStatus == "lost" {
		// Never resume on a missing or unusable slot: start a new candidate.
		log.Info("candidate slot missing or unusable: discarding the stage", "candidate_slot", rs.CandidateSlot)
		return r.resetStage(work, stop, conn, rs, log)
	}
	if s.Active {
		return errSlotActive
	}
	if rs.ActivationBarrier != "" {
		return r.resetReady(work, conn, rs, nil, log)
	}
	// The plugin's Begin carries the 32-bit xid of the marker transaction.
	var barrierXid uint32
	marked := rs.BarrierXid != ""
	if marked {
		x, err := strconv.ParseUint(rs.BarrierXid, 10, 64)
		if err != nil {
			return fmt.Errorf("synchro: barrier xid: %w", err)
		}
		barrierXid = uint32(x)
	}

	if err := OpenStage(work, conn); err != nil {
		return err
	}
	repl, err := connectReplication(work, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer closeReplication(work, repl)
	// No registry activation can commit while a reset is open (activate_registry
	// refuses), and the candidate slot was created after begin_reset: the
	// generation in effect at its consistent point is the latest activated one.
	regGen, err := latestRegistryGeneration(work, conn)
	if err != nil {
		return err
	}
	// Authentic: only the pack's own activations move the decoder (none is genuine
	// while the reset is open). RestartedAt: an activation that already ended a
	// catch-up (the loop records it as for a session, runner.go) is let through the
	// next time.
	key, err := loadMessageKey(work, conn)
	if err != nil {
		return err
	}
	dec, err := r.plugin.Open(work, conn, decode.SessionSpec{Publication: r.cfg.Publication, RegistryGeneration: regGen,
		RestartedAt: r.restartedAt, Authentic: key.VerifyActivation})
	if err != nil {
		if v := Classify(err); v.Disposition == Fatal {
			return r.resetFailure(work, conn, rs.ResetID, err)
		}
		return err
	}
	if err := pglogrepl.StartReplication(work, repl, rs.CandidateSlot, s.ConfirmedFlush,
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: dec.StartOptions()}); err != nil {
		return fmt.Errorf("synchro: start replication (candidate): %w", err)
	}
	log.Info("reset catch-up started", "candidate_slot", rs.CandidateSlot, "start_lsn", s.ConfirmedFlush)

	// The catch-up has caught up once it materialized what was committed when it
	// began; then (or when the slot goes quiet first) the marker is written.
	var walText string
	if err := conn.QueryRow(work, "SELECT pg_catalog.pg_current_wal_lsn()::text").Scan(&walText); err != nil {
		return fmt.Errorf("synchro: current WAL position: %w", err)
	}
	caughtUpAt, err := pglogrepl.ParseLSN(walText)
	if err != nil {
		return err
	}
	cu := &catchUp{r: r, conn: conn, repl: repl, resetID: rs.ResetID, durable: s.ConfirmedFlush}
	cu.ap = newApplier(&r.cfg, r.log, conn, rs.TargetGeneration, NewFrontier(s.ConfirmedFlush, s.ConfirmedFlush), func() {}, 0, key)
	if err := cu.ap.loadRegistered(work, conn, nil, nil); err != nil {
		return err
	}
	coll := collate.New(cu.ap)
	done := false
	for !done {
		r.live.beat(LoopSession)
		if stop.Err() != nil && !cu.ap.inTxn {
			if err := cu.materialize(work); err != nil {
				return r.resetFailure(work, conn, rs.ResetID, err)
			}
			return nil
		}
		rctx, cancel := context.WithTimeout(work, r.cfg.PollInterval+50*time.Millisecond)
		msg, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if work.Err() != nil {
				cu.ap.abort(work)
				return work.Err()
			}
			if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
				// Nothing more buffered: materialize what is complete.
				if !cu.ap.inTxn {
					if err := cu.materialize(work); err != nil {
						return r.resetFailure(work, conn, rs.ResetID, err)
					}
				}
				if err := cu.status(work); err != nil {
					return err
				}
				if !marked && !cu.ap.inTxn {
					// The slot went quiet: caught up with what was committed.
					if barrierXid, err = r.resetMark(work, stop, conn, rs.ResetID, log); err != nil {
						if errors.Is(err, errMarkStopped) {
							return cu.stopped(work, rs.ResetID)
						}
						return err
					}
					marked = true
				}
				continue
			}
			cu.ap.abort(work)
			return fmt.Errorf("synchro: replication receive (candidate): %w", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok {
			if er, isErr := msg.(*pgproto3.ErrorResponse); isErr {
				cu.ap.abort(work)
				return pgconn.ErrorResponseToPgError(er)
			}
			continue
		}
		if len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return fmt.Errorf("synchro: keepalive: %w", err)
			}
			if pkm.ReplyRequested {
				if err := cu.status(work); err != nil {
					return err
				}
			}
			if !marked && !cu.ap.inTxn && !coll.InTransaction() {
				// A keepalive between transactions: the walsender has sent what
				// was committed (WAL of other databases keeps it busy, so the
				// slot need not go quiet). Materialize, then mark.
				if err := cu.materialize(work); err != nil {
					return r.resetFailure(work, conn, rs.ResetID, err)
				}
				if barrierXid, err = r.resetMark(work, stop, conn, rs.ResetID, log); err != nil {
					if errors.Is(err, errMarkStopped) {
						return cu.stopped(work, rs.ResetID)
					}
					return err
				}
				marked = true
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return fmt.Errorf("synchro: xlogdata: %w", err)
			}
			msgs, err := dec.Decode(xld.WALStart, xld.WALData)
			if err == nil {
				err = coll.Feed(work, xld.WALStart, msgs)
			}
			if err != nil {
				cu.ap.abort(work)
				return r.resetFailure(work, conn, rs.ResetID, err)
			}
			if n := len(cu.ap.txns); n > 0 && !cu.ap.inTxn {
				last := cu.ap.txns[n-1]
				if marked && last.xid == barrierXid {
					// The barrier closes its batch; nothing after it is consumed.
					done = true
				}
				if done || n >= min(r.cfg.BatchTxns, catchUpBatchTxns) || cu.ap.events >= min(r.cfg.BatchEvents, catchUpBatchEvents) ||
					cu.ap.lastEnd() >= caughtUpAt {
					if err := cu.materialize(work); err != nil {
						return r.resetFailure(work, conn, rs.ResetID, err)
					}
				}
				if !marked && cu.durable >= caughtUpAt {
					if barrierXid, err = r.resetMark(work, stop, conn, rs.ResetID, log); err != nil {
						if errors.Is(err, errMarkStopped) {
							return cu.stopped(work, rs.ResetID)
						}
						return err
					}
					marked = true
				}
			}
		}
	}
	cur, ok, err := r.ctl.resetState(work)
	if err != nil {
		return err
	}
	if !ok || cur.ResetID != rs.ResetID || cur.ActivationBarrier == "" {
		return errors.New("synchro: reset catch-up passed the marker transaction without reaching the barrier")
	}
	return r.resetReady(work, conn, cur, cu, log)
}

// resetMark writes the coordinator's marker transaction, which selects the
// activation barrier (its end, once the catch-up materialized it: it comes later
// on the slot than everything materialized so far), and returns its 32-bit xid as
// the plugin's Begin carries it.
//
// A stop between attempts (the marker waits for an open push transaction) returns
// errMarkStopped: nothing is in hand then, and the next start marks again.
func (r *Runner) resetMark(ctx, stop context.Context, conn *pgx.Conn, resetID string, log *slog.Logger) (uint32, error) {
	for {
		err := gen.New(conn).RunnerResetMark(ctx, resetID)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			// A push transaction still open: pushes go through while the marker
			// waits between attempts (runner_reset_mark says why).
			r.live.beat(LoopSession)
			if !sleep(stop, 100*time.Millisecond) {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				return 0, errMarkStopped
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("synchro: runner_reset_mark: %w", err)
		}
		break
	}
	cur, ok, err := r.ctl.resetState(ctx)
	if err != nil {
		return 0, err
	}
	if !ok || cur.ResetID != resetID || cur.BarrierXid == "" {
		return 0, errors.New("synchro: reset marker not recorded")
	}
	x, err := strconv.ParseUint(cur.BarrierXid, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("synchro: barrier xid: %w", err)
	}
	log.Info("reset marker written: catching up to the activation barrier", "barrier_xid", x)
	return uint32(x), nil
}

// errMarkStopped: a stop came while the reset's marker waited for its lock.
var errMarkStopped = errors.New("synchro: stopped while the reset marker waited")

// stopped ends a catch-up on a stop with nothing in hand: what is complete is
// materialized, and the next start goes on from there.
func (cu *catchUp) stopped(ctx context.Context, resetID string) error {
	if err := cu.materialize(ctx); err != nil {
		return cu.r.resetFailure(ctx, cu.conn, resetID, err)
	}
	return nil
}

// resetReady acknowledges the candidate slot exactly to the activation barrier
// (over the open replication connection when there is one, else by advancing
// the idle slot) and moves the reset to phase ready.
func (r *Runner) resetReady(ctx context.Context, conn *pgx.Conn, rs gen.RunnerResetStateRow, cu *catchUp, log *slog.Logger) error {
	barrier, err := pglogrepl.ParseLSN(rs.ActivationBarrier)
	if err != nil {
		return err
	}
	if cu != nil {
		cu.durable = barrier
		deadline := time.Now().Add(resetBarrierAckBudget)
		for time.Now().Before(deadline) {
			if err := cu.status(ctx); err != nil {
				return err
			}
			s, err := slotPosition(ctx, conn, rs.CandidateSlot)
			if err != nil {
				return err
			}
			if s.ConfirmedFlush == barrier {
				break
			}
			if !sleep(ctx, r.cfg.PollInterval) {
				return ctx.Err()
			}
		}
		closeReplication(ctx, cu.repl)
	}
	s, err := slotPosition(ctx, conn, rs.CandidateSlot)
	if err != nil {
		return err
	}
	if s.ConfirmedFlush < barrier {
		if s.Active {
			return errSlotActive // the walsender is still exiting: retried
		}
		if err := gen.New(conn).AdvanceReplicationSlot(ctx, gen.AdvanceReplicationSlotParams{
			SlotName: rs.CandidateSlot, Upto: barrier.String()}); err != nil {
			return fmt.Errorf("synchro: advance candidate slot: %w", err)
		}
	}
	for {
		r.live.beat(LoopSession)
		done, err := gen.New(conn).RunnerResetVerify(ctx, gen.RunnerResetVerifyParams{ResetID: rs.ResetID, Chunk: resetChunk})
		if err != nil {
			// SYR02: the staged state failed its verification; the reset fails.
			return r.resetFailure(ctx, conn, rs.ResetID, fmt.Errorf("synchro: runner_reset_verify: %w", err))
		}
		if done {
			break
		}
	}
	if err := gen.New(conn).RunnerResetReady(ctx, rs.ResetID); err != nil {
		return fmt.Errorf("synchro: runner_reset_ready: %w", err)
	}
	log.Info("reset ready: staged state caught up through the activation barrier", "activation_barrier", barrier)
	return nil
}

// Catch-up batches are kept short: their transaction holds the live names of the
// projected-state tables (and their locks) while it runs.
const (
	catchUpBatchTxns   = 100
	catchUpBatchEvents = 5000
)

// catchUp is one catch-up session on the candidate slot. It stages source
// transactions with the stream's own applier (collate.Sink, Stager, COPY into
// pg_temp.synchro_stage) and materializes them with runner_reset_materialize
// instead of materialize_batch: the same SQL, run on the staged state.
type catchUp struct {
	r       *Runner
	conn    *pgx.Conn
	repl    *pgconn.PgConn
	ap      *applier
	resetID string
	durable pglogrepl.LSN // end of the last materialized transaction: what the candidate may confirm
}

// materialize materializes and commits the complete transactions of the open
// batch into the staged state.
func (c *catchUp) materialize(ctx context.Context) error {
	a := c.ap
	if len(a.txns) == 0 {
		return nil
	}
	if err := a.flush(ctx); err != nil {
		a.abort(ctx)
		return err
	}
	// The batch's transaction opens at its first COPY (ensureTx): a batch whose
	// rows all fit in memory opens it here. The catch-up never has a call in flight.
	if err := a.ensureTx(ctx); err != nil {
		a.abort(ctx)
		return err
	}
	n := len(a.txns)
	p := gen.RunnerResetMaterializeParams{
		ResetID:     c.resetID,
		CommitLsns:  make([]string, n),
		EndLsns:     make([]string, n),
		Xids:        make([]int64, n),
		CommitTimes: make([]time.Time, n),
		SetBased:    true,
	}
	for i, t := range a.txns {
		p.CommitLsns[i] = t.trailer.CommitLSN.String()
		p.EndLsns[i] = t.trailer.EndLSN.String()
		p.Xids[i] = int64(t.xid)
		p.CommitTimes[i] = t.trailer.CommitTime
	}
	if _, err := gen.New(a.tx).RunnerResetMaterialize(ctx, p); err != nil {
		a.abort(ctx)
		return err
	}
	if err := a.tx.Commit(ctx); err != nil {
		a.abort(ctx)
		return err
	}
	a.tx = nil
	c.durable = a.txns[n-1].trailer.EndLSN
	clear(a.txns)
	a.txns, a.events = a.txns[:0], 0
	return nil
}

// lastEnd is the end LSN of the last complete transaction staged (0: none).
func (a *applier) lastEnd() pglogrepl.LSN {
	if len(a.txns) == 0 {
		return 0
	}
	return a.txns[len(a.txns)-1].trailer.EndLSN
}

// status confirms the durable catch-up boundary to the candidate slot.
func (c *catchUp) status(ctx context.Context) error {
	err := pglogrepl.SendStandbyStatusUpdate(ctx, c.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: c.durable, WALFlushPosition: c.durable, WALApplyPosition: c.durable})
	if err != nil {
		return fmt.Errorf("synchro: standby status update (candidate): %w", err)
	}
	return nil
}

// dropSlotIfIdle drops a slot of this database if it exists; an active one is
// retried (errSlotActive).
func dropSlotIfIdle(ctx context.Context, conn *pgx.Conn, slot string) error {
	if slot == "" {
		return nil
	}
	s, err := slotPosition(ctx, conn, slot)
	if err != nil || !s.Exists {
		return err
	}
	if s.Active {
		return errSlotActive
	}
	if err := gen.New(conn).DropReplicationSlot(ctx, slot); err != nil {
		return fmt.Errorf("synchro: drop slot: %w", err)
	}
	return nil
}

// latestRegistryGeneration is the latest activated registry generation (0 when
// none registers a relation yet).
func latestRegistryGeneration(ctx context.Context, conn *pgx.Conn) (int64, error) {
	set, err := gen.New(conn).RunnerTableSet(ctx)
	if err != nil {
		return 0, fmt.Errorf("synchro: runner_table_set: %w", err)
	}
	if len(set) == 0 {
		return 0, nil
	}
	return set[0].LatestGeneration, nil
}

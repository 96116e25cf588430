package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro/runner/decode"
)

// Runner is the WAL worker of one Synchro database: it claims the database,
// creates the slot and baseline on first start, then decodes the slot's WAL,
// materializes one source transaction at a time in commit order, and
// acknowledges the slot by ADR 001's rules.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	ctl    *control
	plugin decode.Plugin // the output plugin of Config.Decoder

	state    atomic.Value // heartbeatState
	received atomic.Uint64
	// nudge asks the heartbeat loop for a heartbeat now: a state change reaches
	// synchro.runner (and readiness) at once, not one interval later.
	nudge chan struct{}

	live     liveness
	sessions atomic.Int64 // replication sessions started

	// serialUntil: source transactions up to this commit LSN are materialized
	// one at a time (after a failed batch). Used by the loop goroutine only.
	serialUntil pglogrepl.LSN
	// restartedAt: the registry activation that last ended a session because
	// the plugin's table set predated it (decode.ClassTableSetChanged). Used by
	// the loop goroutine only.
	restartedAt pglogrepl.LSN
}

// New validates cfg and returns a Runner. It connects nothing.
func New(cfg Config) (*Runner, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p, err := PluginFor(c.Decoder)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: c, plugin: p, log: c.Logger.With("component", "runner", "slot", c.Slot, "decoder", c.Decoder),
		nudge: make(chan struct{}, 1)}
	r.live.bound = c.LivenessTimeout
	r.state.Store(stateStarting)
	return r, nil
}

func (r *Runner) setState(s heartbeatState) {
	if old, _ := r.state.Swap(s).(heartbeatState); old != s {
		select {
		case r.nudge <- struct{}{}:
		default:
		}
	}
}

func (r *Runner) getState() heartbeatState { return r.state.Load().(heartbeatState) }

// ErrShutdownTimeout: a stop's drain (finishing the transaction in hand) took
// longer than Config.ShutdownTimeout (synchro run --shutdown-timeout).
var ErrShutdownTimeout = errors.New("synchro: stop: the drain exceeded the shutdown timeout")

// errControlLost: the control session (and with it the runner claim) is gone,
// typically because PostgreSQL restarted or the network dropped. The runner
// stops the session in hand, connects again with backoff, claims again and
// starts over with startup reconciliation.
var errControlLost = errors.New("synchro: control session lost, and with it the runner claim")

// Run runs until ctx is canceled (a clean stop: the source transaction in hand
// is finished and acknowledged, the claim released, nil returned) or a fatal
// failure. Transient failures are retried with a bounded backoff, a lost
// control session (a PostgreSQL restart, a network drop) by claiming again; a
// poison transaction blocks the stream until synchro.retry_poison() is called.
// ErrAlreadyRunning when another runner holds the database.
func (r *Runner) Run(ctx context.Context) (err error) {
	// work outlives ctx by at most ShutdownTimeout, so the transaction in hand
	// can finish after a stop. Past it the work in hand is abandoned (rolled back;
	// the next start replays it from the slot) and Run says so, rather than
	// returning the bare cancellation (which exited 1 with "context canceled").
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	var (
		drainMu    sync.Mutex
		drain      *time.Timer
		returned   bool
		drainFired atomic.Bool
	)
	stopAfter := context.AfterFunc(ctx, func() {
		r.setState(stateStopping)
		drainMu.Lock()
		defer drainMu.Unlock()
		if !returned {
			drain = time.AfterFunc(r.cfg.ShutdownTimeout, func() { drainFired.Store(true); cancelWork() })
		}
	})
	defer func() {
		stopAfter()
		drainMu.Lock()
		returned = true
		if drain != nil {
			drain.Stop()
		}
		drainMu.Unlock()
		// Whatever the return says: the bound's cancellation can also end the run as
		// a lost control session, which returns nil after a stop (review 2026-12-05).
		if drainFired.Load() {
			if err == nil {
				err = context.Canceled
			}
			err = fmt.Errorf("%w (%s): the work in hand was abandoned and the next start replays it: %w",
				ErrShutdownTimeout, r.cfg.ShutdownTimeout, err)
		}
	}()
	defer r.live.idle(LoopSession)

	r.live.beat(LoopSession)
	// PostgreSQL may be down (or restarting) when the runner starts: the first
	// claim is retried with backoff like any transient failure, not left to a
	// supervisor's restart loop.
	bo := newBackoff(r.cfg.BackoffMin, r.cfg.BackoffMax)
	ver, err := r.claimRetrying(work, ctx, bo, true)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // stopped before the first claim: nothing to release
	}
	bo.Reset()
	defer func() { r.ctl.close(work) }()
	// Capabilities are refused at start, before any slot is created: never
	// degraded at run time.
	if err := decode.CheckCapabilities(r.plugin, ver); err != nil {
		r.log.Error("runner cannot go on: the decoder lacks a capability Synchro needs", "err", err)
		return &fatalError{err: fmt.Errorf("synchro: fatal: decoder %s: %w", r.cfg.Decoder, err)}
	}
	if err := r.probeRetrying(work, ctx, bo); err != nil || ctx.Err() != nil {
		return err
	}
	bo.Reset()
	r.log.Info("runner claimed the database", "owner", r.cfg.Owner, "publication", r.cfg.Publication)
	if r.plugin.Name() == "wal2json" {
		// Known, not fixed: wal2json escapes a logical message into its JSON, and a
		// stranger's message of about 180 MiB of control characters passes 1 GB there:
		// the walsender fails at that record at every restart. Said once, at start,
		// while every role may emit messages (docs/decoders.md has the remedy).
		if public, err := r.ctl.publicEmitsMessages(work); err == nil && public {
			r.log.Warn("wal2json: every role may call pg_logical_emit_message, and one huge message from any of them stops capture under this decoder: revoke it from PUBLIC or use pgoutput (docs/decoders.md)")
		}
	}

	if r.cfg.Metrics != nil {
		var obs sync.WaitGroup
		obsQuit := make(chan struct{})
		obs.Go(func() { r.observeLoop(work, obsQuit) })
		defer func() { close(obsQuit); obs.Wait() }()
	}

	for {
		err := r.serve(work, ctx)
		if errors.Is(err, errControlLost) && ctx.Err() != nil {
			return nil // stopped: the claim went with the control session
		}
		if !errors.Is(err, errControlLost) {
			return err
		}
		r.setState(stateRetrying)
		r.log.Warn("control session lost (PostgreSQL restarted or the connection dropped): claiming the database again",
			"err", err)
		if err := r.reclaim(work, ctx, bo); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil // stopped while reconnecting: no claim left to release
		}
		bo.Reset()
	}
}

// IsFatal reports whether err is a fatal state the runner already logged (one
// line naming it) when it stopped: a lost slot or one with another plugin, a
// missing slot or publication, a slot that contradicts durable progress.
func IsFatal(err error) bool {
	var fatal *fatalError
	return errors.As(err, &fatal) || errors.Is(err, ErrSlotMismatch)
}

// reclaim connects and claims again after the control session was lost, with
// bounded exponential backoff (see claimRetrying).
func (r *Runner) reclaim(work, stop context.Context, bo *backoff) error {
	r.ctl.close(work)
	if _, err := r.claimRetrying(work, stop, bo, false); err != nil {
		if !IsFatal(err) { // a fatal state has its line already (claimRetrying)
			r.log.Error("runner cannot claim the database again", "err", err)
		}
		return err
	}
	if stop.Err() == nil {
		r.log.Info("runner claimed the database again")
	}
	return nil
}

// claimRetrying opens the control session, claims the database on it and reads
// the server's version (server_version_num), with bounded exponential backoff: a
// connection failure, a session the server refuses for now (it is down, starting,
// shutting down or in recovery, at its connection limit, or the database does
// not accept connections: IsTransientRefusal) or another transient error is
// logged with why (the error and the delay), counted and retried until stop,
// which returns nil with r.ctl closed. first: the runner's first claim (before it
// ever held the database). ErrAlreadyRunning (another runner holds the database),
// a URL that does not parse and every other refusal (authentication, a database
// that does not exist, a missing pack) are returned; a fatal one is logged here,
// in one line naming it.
func (r *Runner) claimRetrying(work, stop context.Context, bo *backoff, first bool) (int, error) {
	msg := "reconnecting: retrying"
	if first {
		msg = "cannot reach the database to claim it yet: retrying"
	}
	for {
		r.live.beat(LoopSession)
		ctl, err := openControl(work, r.cfg.DatabaseURL)
		if err == nil {
			if err = ctl.claim(work, &r.cfg); err == nil {
				var ver int
				if ver, err = ctl.serverVersion(work); err == nil {
					r.ctl = ctl
					return ver, nil
				}
			}
			ctl.close(work) // the claim, if taken, goes with the session
			r.ctl = ctl     // closed; Run's deferred close is a no-op
		} else {
			r.ctl = &control{conn: nil}
		}
		if errors.Is(err, ErrAlreadyRunning) || errors.Is(err, errParseURL) || Classify(err).Disposition != Transient {
			if IsFatal(err) {
				r.log.Error("runner cannot go on: fatal state, not retried", "err", err)
			}
			return 0, err
		}
		d := bo.Delay()
		r.cfg.Metrics.transientError()
		r.log.Warn(msg, "err", err, "backoff", d)
		if !sleep(stop, d) {
			return 0, nil
		}
	}
}

// probeRetrying runs probe with bounded backoff while it fails transiently (its
// connection refused or cut); nil on stop. A fatal refusal is returned.
func (r *Runner) probeRetrying(work, stop context.Context, bo *backoff) error {
	for {
		r.live.beat(LoopSession)
		err := r.probe(work)
		if err == nil || IsFatal(err) || Classify(err).Disposition != Transient {
			if err != nil && IsFatal(err) && isConnectFailure(err) {
				r.log.Error("runner cannot go on: fatal state, not retried", "err", err)
			}
			return err
		}
		d := bo.Delay()
		r.cfg.Metrics.transientError()
		r.log.Warn("decoder probe failed: retrying", "err", err, "backoff", d)
		if !sleep(stop, d) {
			return nil
		}
	}
}

// serve runs the heartbeat and the session loop on the claimed control session
// until a clean stop (the claim released), a fatal failure, or the loss of the
// control session (errControlLost, nothing released: the claim went with it).
func (r *Runner) serve(work, stop context.Context) error {
	claimed, cancelClaimed := context.WithCancel(work)
	defer cancelClaimed()
	var lost atomic.Bool
	// The heartbeat stops by a signal, never by canceling a query in flight: that
	// would close the control session, and runner_release needs it.
	var hb sync.WaitGroup
	hbQuit := make(chan struct{})
	hb.Go(func() {
		r.heartbeatLoop(claimed, hbQuit, func() { lost.Store(true); cancelClaimed() })
	})
	stopHeartbeat := sync.OnceFunc(func() { close(hbQuit); hb.Wait(); r.live.idle(LoopHeartbeat) })
	defer stopHeartbeat()

	err := r.loop(claimed, stop)
	if lost.Load() || errors.Is(err, errControlLost) {
		return errControlLost
	}
	if err != nil {
		return err
	}
	r.setState(stateStopping)
	stopHeartbeat()
	if rerr := r.ctl.release(work); rerr != nil {
		r.log.Warn("runner_release failed", "err", rerr)
	}
	r.log.Info("runner stopped")
	return nil
}

// loop runs sessions until a clean stop or a fatal error.
func (r *Runner) loop(work, stop context.Context) error {
	bo := newBackoff(r.cfg.BackoffMin, r.cfg.BackoffMax)
	defer r.live.idle(LoopSession)
	for stop.Err() == nil {
		r.live.beat(LoopSession)
		if work.Err() != nil {
			return work.Err()
		}
		err := r.step(work, stop)
		r.live.beat(LoopSession)
		var (
			pe    *PoisonError
			fatal *fatalError
			bf    *batchFallbackError
		)
		switch {
		case err == nil:
			bo.Reset()
		case errors.Is(err, errControlLost):
			return err
		case errors.As(err, &bf):
			// Not a failure of the stream: the next session re-reads the batch's
			// transactions from the slot and materializes them one at a time.
			r.serialUntil = max(r.serialUntil, bf.Through)
		case errors.As(err, &fatal), errors.Is(err, ErrSlotMismatch):
			r.log.Error("runner cannot go on: fatal state, not retried", "err", err)
			return err
		case errors.As(err, &pe):
			bo.Reset()
			r.setState(statePoisoned)
		case isTableSetChanged(err):
			// Not a failure: the plugin's table set predates an activation in
			// the stream; the next session reads it again and re-reads the
			// activation's transaction from the slot.
			r.restartedAt = tableSetChangedAt(err)
			r.log.Info("registry activation in the stream: reading the decoder's table set again", "lsn", r.restartedAt)
		case errors.Is(err, errBlocked):
			r.setState(statePoisoned)
			if !r.awaitRetry(work, stop) {
				return work.Err()
			}
		case isBootstrapPending(err):
			// Not a failure: the main worker reached a projection bootstrap that is
			// not staged yet; the next step stages it and the session replays the
			// transaction from the slot.
			r.log.Info("projection bootstrap in the stream: staging it before the stream goes on")
			sleep(stop, r.cfg.BackoffMin)
		default:
			if work.Err() != nil {
				return work.Err()
			}
			if stop.Err() != nil && isContextErr(err) {
				return nil
			}
			d := bo.Delay()
			r.cfg.Metrics.transientError()
			r.log.Warn("transient failure: retrying", "err", err, "backoff", d)
			r.setState(stateRetrying)
			sleep(stop, d)
		}
	}
	return nil
}

// step makes sure a stream exists, then runs one session.
func (r *Runner) step(work, stop context.Context) error {
	// The control session answers first: a session starts only under a live claim.
	// A pack migrated past this runner's release is not run at all (pack.go).
	if err := r.ctl.checkPack(work); err != nil {
		if r.ctl.lost() {
			return fmt.Errorf("%w: %w", errControlLost, err)
		}
		return err
	}
	st, ok, err := r.ctl.state(work)
	if err != nil {
		if r.ctl.lost() {
			return fmt.Errorf("%w: %w", errControlLost, err)
		}
		return err
	}
	if ok {
		// A projection bootstrap activated on this stream: stage it before the
		// session, whose main worker merges it (bootstrap_stage.go). With a reset
		// open only the row versions are allocated (the reset subsumes the stage);
		// under another decoder than the stream's nothing is staged (refused below).
		resetOpen := r.resetOpen(work)
		if resetOpen || st.Plugin == r.plugin.Name() {
			if err := r.serveBootstrap(work, stop, resetOpen); err != nil {
				if r.ctl.lost() {
					return fmt.Errorf("%w: %w", errControlLost, err)
				}
				return err
			}
		}
		// An open stream reset blocks the old stream: serve it instead (reset.go).
		// Its candidate is decoded with this runner's decoder, whatever the old
		// stream's plugin (a reset is how a stream switches decoders).
		if handled, err := r.serveReset(work, stop); handled {
			return err
		}
	}
	if ok && st.Plugin != r.plugin.Name() {
		return &fatalError{err: fmt.Errorf(
			"synchro: fatal: the stream records output plugin %q, the runner decodes with %q (--decoder): "+
				"switching decoders needs a stream reset (docs/decoders.md)", st.Plugin, r.plugin.Name())}
	}
	if !ok {
		if err := r.bootstrap(work, stop); err != nil {
			if v := Classify(err); v.Disposition != Transient {
				// A deploy that migrated the pack past this runner during the baseline
				// (the step's check came before it): the release mismatch's failure,
				// not a fatal state; the next step waits (pack.go).
				if perr := r.ctl.checkPack(work); perr != nil {
					return fmt.Errorf("%w (a baseline failure with SQLSTATE %s)", perr, v.SQLState)
				}
				return &fatalError{err: err}
			}
			return err
		}
	}
	return r.session(work, stop)
}

// awaitRetry polls durable state while a poison blocks the stream; true when a
// retry is requested (or the poison is gone), false on stop.
func (r *Runner) awaitRetry(work, stop context.Context) bool {
	r.log.Info("stream blocked by a poison transaction: waiting for synchro.retry_poison()")
	t := time.NewTicker(r.cfg.PollInterval)
	defer t.Stop()
	for {
		r.live.beat(LoopSession)
		st, ok, err := r.ctl.state(work)
		if err == nil && (!ok || !st.Poisoned() || st.RetryRequested) {
			return stop.Err() == nil
		}
		if err == nil && r.resetOpen(work) {
			return stop.Err() == nil // an operator's stream reset: the loop serves it
		}
		if err != nil && r.ctl.lost() {
			return stop.Err() == nil // the next step reports the lost control session
		}
		if err != nil && !isContextErr(err) {
			r.log.Warn("runner_state failed while blocked", "err", err)
		}
		select {
		case <-stop.Done():
			return false
		case <-work.Done():
			return false
		case <-t.C:
		}
	}
}

// heartbeatLoop records a heartbeat every interval and keeps the applier's
// liveness up to date while its backend works. Losing the control session loses
// the claim: lost is called and the loop ends (Run claims again).
func (r *Runner) heartbeatLoop(ctx context.Context, quit <-chan struct{}, lost func()) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		r.live.beat(LoopHeartbeat)
		hctx, cancel := context.WithTimeout(ctx, heartbeatBudget)
		err := r.ctl.heartbeat(hctx, pglogrepl.LSN(r.received.Load()), string(r.getState()))
		if err == nil {
			r.refreshApplier(hctx)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			if r.ctl.lost() {
				r.log.Warn("heartbeat: control session lost", "err", err)
				lost()
				return
			}
			r.log.Warn("heartbeat failed", "err", err)
		}
		r.live.beat(LoopHeartbeat)
		select {
		case <-quit:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.nudge:
		}
	}
}

// probe checks on a connection of its own that the server's build of the
// plugin accepts the runner's options (a temporary slot at most), before any
// slot of the stream exists. A refusal is fatal, with the capability named.
//
// A stream that already decodes with this plugin (and no reset open) is not
// probed: creating the temporary slot waits for every transaction of the cluster
// that holds an xid, so a restart would stall behind any long transaction of the
// application (pgoutput's restart does not), and nothing would be learned that the
// session does not check itself: its START_REPLICATION refuses an option the
// build lacks (fatal, startRefusal) and its Open refuses the columns.
func (r *Runner) probe(ctx context.Context) error {
	p, ok := r.plugin.(decode.Prober)
	if !ok {
		return nil // pgoutput: nothing to check, no connection
	}
	if st, exists, err := r.ctl.state(ctx); err == nil && exists && st.Plugin == r.plugin.Name() && !r.resetOpen(ctx) {
		return nil
	}
	conn, err := connect(ctx, r.cfg.DatabaseURL, "synchro-runner-probe")
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, conn)
	if err := p.Probe(ctx, conn); err != nil {
		if v := Classify(err); v.Disposition == Fatal {
			// The class says which: the plugin refuses an option (capability_unsupported,
			// config_invalid) or cannot carry a registered value (value_not_representable).
			r.log.Error("runner cannot go on: the decoder cannot serve this stream", "class", v.Class, "err", err)
			return &fatalError{err: fmt.Errorf("synchro: fatal: decoder %s: %w", r.cfg.Decoder, err)}
		}
		return err
	}
	return nil
}

// isBootstrapPending reports a session ended by SYW01 (synchro._bootstrap_catch_up).
func isBootstrapPending(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "SYW01"
}

// isTableSetChanged reports a session ended by decode.ClassTableSetChanged.
func isTableSetChanged(err error) bool {
	c, ok := decode.ClassOf(err)
	return ok && c == decode.ClassTableSetChanged
}

func tableSetChangedAt(err error) pglogrepl.LSN {
	var e *decode.Error
	if errors.As(err, &e) {
		return e.LSN
	}
	return 0
}

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

	"github.com/synchro/synchro/runner/decode"
)

// Runner is the WAL worker of one Synchro database: it claims the database,
// creates the slot and baseline on first start, then decodes the slot's WAL,
// materializes one source transaction at a time in commit order, and
// acknowledges the slot by ADR 001's rules.
type Runner struct {
	cfg Config
	log *slog.Logger
	ctl *control

	state    atomic.Value // heartbeatState
	received atomic.Uint64
	// nudge asks the heartbeat loop for a heartbeat now: a state change reaches
	// synchro.runner (and readiness) at once, not one interval later.
	nudge chan struct{}

	fatalMu sync.Mutex
	fatal   error // set when the claim is lost

	// serialUntil: source transactions up to this commit LSN are materialized
	// one at a time (after a failed batch). Used by the loop goroutine only.
	serialUntil pglogrepl.LSN
}

// New validates cfg and returns a Runner. It connects nothing.
func New(cfg Config) (*Runner, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: c, log: c.Logger.With("component", "runner", "slot", c.Slot), nudge: make(chan struct{}, 1)}
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

// Run runs until ctx is canceled (a clean stop: the source transaction in hand
// is finished and acknowledged, the claim released, nil returned) or a fatal
// failure. Transient failures are retried with a bounded backoff; a poison
// transaction blocks the stream until synchro.retry_poison() is called.
// ErrAlreadyRunning when another runner holds the database.
func (r *Runner) Run(ctx context.Context) error {
	// work outlives ctx by at most ShutdownTimeout, so the transaction in hand
	// can finish after a stop.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopAfter := context.AfterFunc(ctx, func() {
		r.setState(stateStopping)
		time.AfterFunc(r.cfg.ShutdownTimeout, cancelWork)
	})
	defer stopAfter()

	ctl, err := openControl(work, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	r.ctl = ctl
	defer ctl.close(work)
	if err := ctl.claim(work, &r.cfg); err != nil {
		return err
	}
	ver, err := ctl.serverVersion(work)
	if err != nil {
		return err
	}
	if err := decode.CheckCapabilities(decode.NewPgOutput(), ver); err != nil {
		return err
	}
	r.log.Info("runner claimed the database", "owner", r.cfg.Owner, "publication", r.cfg.Publication)

	// The heartbeat stops by a signal, never by canceling a query in flight: that
	// would close the control session, and runner_release needs it.
	var hb sync.WaitGroup
	hbQuit := make(chan struct{})
	hb.Go(func() { r.heartbeatLoop(work, hbQuit, cancelWork) })
	stopHeartbeat := sync.OnceFunc(func() { close(hbQuit); hb.Wait() })
	defer stopHeartbeat()

	err = r.loop(work, ctx)
	if f := r.claimLost(); f != nil {
		return f
	}
	var death *deathError
	if errors.As(err, &death) {
		return err // simulated death: release nothing
	}
	if err != nil {
		return err
	}
	r.setState(stateStopping)
	stopHeartbeat()
	if rerr := ctl.release(work); rerr != nil {
		r.log.Warn("runner_release failed", "err", rerr)
	}
	r.log.Info("runner stopped")
	return nil
}

// loop runs sessions until a clean stop or a fatal error.
func (r *Runner) loop(work, stop context.Context) error {
	bo := newBackoff(r.cfg.BackoffMin, r.cfg.BackoffMax)
	for stop.Err() == nil {
		if work.Err() != nil {
			return work.Err()
		}
		err := r.step(work, stop)
		var (
			pe    *PoisonError
			fatal *fatalError
			death *deathError
			bf    *batchFallbackError
		)
		switch {
		case err == nil:
			bo.Reset()
		case errors.As(err, &death):
			return err
		case errors.As(err, &bf):
			// Not a failure of the stream: the next session re-reads the batch's
			// transactions from the slot and materializes them one at a time.
			r.serialUntil = max(r.serialUntil, bf.Through)
		case errors.As(err, &fatal), errors.Is(err, ErrSlotMismatch):
			r.log.Error("runner cannot go on", "err", err)
			return err
		case errors.As(err, &pe):
			bo.Reset()
			r.setState(statePoisoned)
		case errors.Is(err, errBlocked):
			r.setState(statePoisoned)
			if !r.awaitRetry(work, stop) {
				return work.Err()
			}
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
	_, ok, err := r.ctl.state(work)
	if err != nil {
		return err
	}
	if !ok {
		if err := r.bootstrap(work); err != nil {
			if v := Classify(err); v.Disposition != Transient {
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
		st, ok, err := r.ctl.state(work)
		if err == nil && (!ok || !st.Poisoned() || st.RetryRequested) {
			return stop.Err() == nil
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

// heartbeatLoop records a heartbeat every interval. Losing the control session
// loses the claim: the runner must stop.
func (r *Runner) heartbeatLoop(ctx context.Context, quit <-chan struct{}, abort context.CancelFunc) {
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		hctx, cancel := context.WithTimeout(ctx, heartbeatBudget)
		err := r.ctl.heartbeat(hctx, pglogrepl.LSN(r.received.Load()), string(r.getState()))
		cancel()
		if err != nil && ctx.Err() == nil {
			if r.ctl.lost() {
				r.setFatal(fmt.Errorf("synchro: control session lost, and with it the runner claim: %w", err))
				abort()
				return
			}
			r.log.Warn("heartbeat failed", "err", err)
		}
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

func (r *Runner) setFatal(err error) {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	if r.fatal == nil {
		r.fatal = err
	}
}

func (r *Runner) claimLost() error {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatal
}

package runner

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/synchro/synchro/gen"
)

// Loop names one of the runner's loops, as /livez reports it.
type Loop string

// The loops /livez watches.
const (
	// LoopSession runs sessions one after another: connects, reconciles the
	// slot at startup, backs off after a failure, re-claims after a lost
	// control session.
	LoopSession Loop = "session"
	// LoopReader receives from the replication connection.
	LoopReader Loop = "reader"
	// LoopApplier decodes and materializes.
	LoopApplier Loop = "applier"
	// LoopHeartbeat records the heartbeat on the control session.
	LoopHeartbeat Loop = "heartbeat"
)

var allLoops = [...]Loop{LoopSession, LoopReader, LoopApplier, LoopHeartbeat}

// loopClock is when a loop last made progress; 0 while the loop is not
// running (between sessions the reader and the applier do not exist).
type loopClock struct{ last atomic.Int64 }

// liveness tracks the last progress of each loop. A loop that runs and has not
// made progress for longer than bound is stuck. Progress is recorded per
// receive (reader), per item, COPY batch and materialization call (applier;
// while a call is in flight only a data item or the call's end counts, not a
// keepalive or a tick),
// per heartbeat attempt and per iteration or backoff of the session loop. A
// materialization call that is still running counts as progress while its
// backend works (pg_stat_activity shows it active and not waiting for a lock):
// see refreshApplier.
type liveness struct {
	bound  time.Duration
	clocks [len(allLoops)]loopClock
	// applyPID is the backend of the session's apply connection, 0 without one;
	// applyPID2 that of its second (pipelined batches), 0 without one.
	applyPID, applyPID2 atomic.Uint32
}

func loopIndex(l Loop) int {
	for i, x := range allLoops {
		if x == l {
			return i
		}
	}
	panic("synchro: unknown loop " + string(l))
}

// beat records progress of l now (and marks it running).
func (lv *liveness) beat(l Loop) {
	lv.clocks[loopIndex(l)].last.Store(time.Now().UnixNano())
}

// idle marks l as not running: it is not judged until its next beat.
func (lv *liveness) idle(l Loop) {
	lv.clocks[loopIndex(l)].last.Store(0)
}

// stuck lists the running loops without progress for longer than the bound,
// in a fixed order.
func (lv *liveness) stuck(now time.Time) []Loop {
	var out []Loop
	for i, l := range allLoops {
		last := lv.clocks[i].last.Load()
		if last != 0 && now.Sub(time.Unix(0, last)) > lv.bound {
			out = append(out, l)
		}
	}
	return out
}

// stale reports whether l runs and has made no progress for half the bound.
func (lv *liveness) stale(l Loop, now time.Time) bool {
	last := lv.clocks[loopIndex(l)].last.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) > lv.bound/2
}

// Live reports whether every running loop of the runner made progress within
// the liveness bound (Config.LivenessTimeout), and otherwise which loops are
// stuck. It reads only the runner's memory.
func (r *Runner) Live() (bool, []string) {
	stuck := r.live.stuck(time.Now())
	if len(stuck) == 0 {
		return true, nil
	}
	names := make([]string, len(stuck))
	for i, l := range stuck {
		names[i] = string(l)
	}
	return false, names
}

// refreshApplier runs on the heartbeat loop: when the applier has made no
// progress for half the bound, it asks pg_stat_activity whether the apply
// backend is still working (active and not waiting for a heavyweight lock). A
// long materialization that works is progress; one blocked by a lock, or an
// apply session that is gone or idle, is not.
func (r *Runner) refreshApplier(ctx context.Context) {
	if !r.live.stale(LoopApplier, time.Now()) {
		return
	}
	// Either apply backend working is progress: with pipelined batches one may
	// wait (in the runner, not for a lock) for the other's batch.
	for _, pid := range []uint32{r.live.applyPID.Load(), r.live.applyPID2.Load()} {
		if pid == 0 {
			continue
		}
		r.ctl.mu.Lock()
		working, err := gen.New(r.ctl.conn).BackendWorking(ctx, int32(pid))
		r.ctl.mu.Unlock()
		if err == nil && working {
			r.live.beat(LoopApplier)
			r.log.Debug("materialization still working: applier live", "backend_pid", pid)
			return
		}
	}
}

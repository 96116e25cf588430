package runner

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner/decode"
)

// snapshotName is the shape of an exported snapshot name (SET TRANSACTION
// SNAPSHOT takes no parameters, so it is checked before it is quoted in).
var snapshotName = regexp.MustCompile(`^[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+$`)

// bootstrap is the first start: create the slot with an exported snapshot and,
// while its creating connection stays open and idle, materialize the baseline of
// the rows already there under that snapshot. The slot's consistent point
// becomes generation_start of stream generation 1.
//
// A stop while the slot's creation waits for the transactions running in the
// cluster (one idle application transaction holds it for as long as it stays
// open) ends the wait: nothing is created then (the server drops a slot still
// being created), and the next start begins again. Once the slot exists the
// baseline is the transaction in hand, finished after a stop.
func (r *Runner) bootstrap(ctx, stop context.Context) (err error) {
	r.setState(stateBaseline)
	conn, err := connect(ctx, r.cfg.DatabaseURL, "synchro-runner-baseline")
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, conn)

	s, err := slotPosition(ctx, conn, r.cfg.Slot)
	if err != nil {
		return err
	}
	if s.Exists {
		// No stream generation names it: the leftover of a first start that died
		// before its baseline committed. Its snapshot is gone; make a new one.
		if s.Plugin != r.plugin.Name() {
			// Not ours to drop: someone else's slot under the configured name.
			return &fatalError{err: fmt.Errorf(
				"synchro: fatal: replication slot %q exists with output plugin %q, the stream needs %q", r.cfg.Slot, s.Plugin, r.plugin.Name())}
		}
		if s.Active {
			return errSlotActive
		}
		r.log.Warn("dropping a slot left by an unfinished first start")
		if err := gen.New(conn).DropReplicationSlot(ctx, r.cfg.Slot); err != nil {
			return fmt.Errorf("synchro: drop unfinished slot: %w", err)
		}
	}

	repl, err := connectReplication(ctx, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer closeReplication(ctx, repl)
	// Creating the slot waits for every transaction running in the cluster, for
	// as long as they run: not watched by /livez.
	r.live.idle(LoopSession)
	plugin := r.plugin.Name()
	sctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(stop, cancel)
	res, err := decode.CreateSlot(sctx, repl, r.plugin, r.cfg.Slot)
	unhook()
	cancel()
	if err != nil {
		if stop.Err() != nil && ctx.Err() == nil {
			// A clean stop (the session loop returns nil on a canceled context
			// after a stop), not a failure of the first start.
			r.log.Info("stopped while the first start's slot waited for running transactions")
			return fmt.Errorf("synchro: create replication slot: %w", context.Canceled)
		}
		return fmt.Errorf("synchro: create replication slot: %w", err)
	}
	defer func() {
		if err != nil {
			// The slot has no stream: drop it rather than leave WAL pinned.
			closeReplication(ctx, repl)
			if derr := gen.New(conn).DropReplicationSlot(context.WithoutCancel(ctx), r.cfg.Slot); derr != nil {
				r.log.Warn("could not drop the slot of a failed baseline", "err", derr)
			}
		}
	}()
	r.live.beat(LoopSession)
	r.cfg.faults.Reach(fault.SlotCreated)
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
	// The baseline can take long on large tables: while it runs, it is watched
	// like a materialization (progress while its backend works).
	r.live.applyPID.Store(conn.PgConn().PID())
	r.live.beat(LoopApplier)
	r.live.idle(LoopSession)
	defer func() { r.live.applyPID.Store(0); r.live.idle(LoopApplier); r.live.beat(LoopSession) }()
	sg, err := gen.New(tx).RunnerBaseline(ctx, gen.RunnerBaselineParams{
		SlotName: r.cfg.Slot, Plugin: plugin, ConsistentPoint: cp.String()})
	if err != nil {
		return fmt.Errorf("synchro: runner_baseline: %w", err)
	}
	r.cfg.faults.Reach(fault.Baseline)
	// runner_baseline ends holding the registry lock, so no activation commits
	// from here to the commit. One that committed after the snapshot requested no
	// projection bootstrap (there was no stream yet) and the baseline holds none of
	// it: start over, with a snapshot that sees it.
	if err = r.baselineCurrent(ctx, tx); err != nil {
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		return fmt.Errorf("synchro: commit baseline: %w", err)
	}
	r.log.Info("baseline materialized: stream created", "stream_generation", sg, "generation_start_lsn", cp)
	return nil
}

// errBaselineRaced: a registry activation committed after the baseline's
// snapshot; the first start begins again (transient).
var errBaselineRaced = errors.New("synchro: a registry activation committed while the baseline was taken: starting over with a new slot")

// baselineCurrent checks that the registry generation the baseline's snapshot
// saw is the latest activated one, read now on a connection of its own.
func (r *Runner) baselineCurrent(ctx context.Context, tx pgx.Tx) error {
	seen, err := gen.New(tx).RunnerTableSet(ctx)
	if err != nil {
		return fmt.Errorf("synchro: runner_table_set: %w", err)
	}
	check, err := connect(ctx, r.cfg.DatabaseURL, "synchro-runner-baseline")
	if err != nil {
		return err
	}
	defer closeQuietly(ctx, check)
	now, err := gen.New(check).RunnerTableSet(ctx)
	if err != nil {
		return fmt.Errorf("synchro: runner_table_set: %w", err)
	}
	latest := func(set []gen.RunnerTableSetRow) int64 {
		if len(set) == 0 {
			return 0
		}
		return set[0].LatestGeneration
	}
	if latest(seen) != latest(now) {
		r.log.Warn("registry activation during the first start's baseline: starting over",
			"seen_generation", latest(seen), "latest_generation", latest(now))
		return errBaselineRaced
	}
	return nil
}

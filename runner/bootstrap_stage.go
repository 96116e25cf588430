package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/internal/fault"
)

// The runner's part of a projection bootstrap (docs/bootstrap.md; ADR 001, "Causally
// Bound Projection Baseline And Stream Reset", last paragraph). activate_registry
// only records the request; before each session the loop stages what is requested:
//
//   - row versions for rows that never passed a fence, in short chunks that lock no
//     table (the activation's triggers version every later write);
//   - a temporary logical slot created with an exported snapshot through the
//     replication protocol; its connection stays open until the REPEATABLE READ
//     transaction imported the snapshot and staged every bootstrapped relation's
//     rows, count, digest and push-fence coverage under it (runner_bootstrap_stage),
//     with the slot's consistent point C.
//
// The session's main worker is the catch-up: it waits at the activation until the
// stage is committed (SYW01 ends the session, nothing written), skips the relation's
// events of transactions that committed before C, and merges the stage at its first
// transaction end at or after C (synchro._bootstrap_catch_up). A death while staging
// loses the snapshot with its connection and rolls the stage back: the next step
// takes a new one. Writers of the table never wait for the copy.

// stateBootstrapping: the runner stages a projection bootstrap (synchro.runner.state).
const stateBootstrapping heartbeatState = "bootstrapping"

// bootstrapVersionChunk bounds the keys of one version-allocation transaction.
const bootstrapVersionChunk = 2000

// serveBootstrap stages the requested projection bootstraps, if any. With a stream
// reset open it only allocates the row versions (the reset's baseline needs them;
// its activation subsumes the bootstrap).
//
// A stop while the temporary slot's creation waits for the transactions running in
// the cluster ends the wait, as in a stream reset: nothing was staged, and the next
// start stages the bootstrap again.
func (r *Runner) serveBootstrap(work, stop context.Context, resetOpen bool) (err error) {
	conn, err := connect(work, r.cfg.DatabaseURL, "synchro-runner-bootstrap", applyParams[:]...)
	if err != nil {
		return err
	}
	defer closeQuietly(work, conn)
	todo, err := gen.New(conn).RunnerBootstrapBegin(work)
	if err != nil {
		return fmt.Errorf("synchro: runner_bootstrap_begin: %w", err)
	}
	if len(todo) == 0 {
		return nil
	}
	r.setState(stateBootstrapping)
	log := r.log.With("bootstrap_generation", todo[len(todo)-1].Generation, "relations", len(todo))
	defer func() {
		if err != nil && work.Err() == nil && stop.Err() == nil {
			// A session that could not be opened says nothing about the stage: a
			// fatal refusal stops the runner, and the stage is retried after it.
			if v := Classify(err); v.Disposition != Transient && !isConnectFailure(err) && checkPack(context.WithoutCancel(work), conn) == nil {
				// (A pack newer than this runner: the release mismatch's failure, not
				// the stage's; nothing recorded, the next step waits: pack.go.)
				detail := v.Class
				if detail == "" {
					detail = "staging_failed"
				}
				if ferr := gen.New(conn).RunnerBootstrapFail(context.WithoutCancel(work), detail); ferr != nil {
					log.Warn("runner_bootstrap_fail failed", "err", ferr)
				}
			}
			log.Warn("projection bootstrap staging failed: the stream waits at the activation, retrying", "err", err)
		}
	}()

	began := time.Now()
	done := map[int64]bool{}
	for _, b := range todo {
		if done[b.RelationID] {
			continue
		}
		done[b.RelationID] = true
		if err := r.bootstrapVersions(work, conn, b.RelationID); err != nil {
			return err
		}
	}
	if resetOpen {
		log.Info("projection bootstrap: row versions allocated; a stream reset is open and will subsume the stage")
		return nil
	}

	repl, err := connectReplication(work, r.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer closeReplication(work, repl)
	// A temporary slot: only its exported snapshot and consistent point are needed
	// (the main stream reads the WAL after C), and it goes with its connection.
	slot := fmt.Sprintf("synchro_bootstrap_%d", repl.PID())
	// Creating the slot waits for every transaction running in the cluster.
	r.live.idle(LoopSession)
	sctx, cancel := context.WithCancel(work)
	unhook := context.AfterFunc(stop, cancel)
	res, err := pglogrepl.CreateReplicationSlot(sctx, repl, slot, r.plugin.Name(),
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, SnapshotAction: "EXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	unhook()
	cancel()
	r.live.beat(LoopSession)
	if err != nil {
		if stop.Err() != nil && work.Err() == nil {
			log.Info("stopped while the bootstrap slot waited for running transactions: staged at the next start")
			return fmt.Errorf("synchro: create bootstrap slot: %w", context.Canceled)
		}
		return fmt.Errorf("synchro: create bootstrap slot: %w", err)
	}
	cp, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("synchro: consistent point: %w", err)
	}
	if !snapshotName.MatchString(res.SnapshotName) {
		return errors.New("synchro: unexpected exported snapshot name")
	}
	tx, err := conn.BeginTx(work, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(work)) }()
	if _, err = tx.Exec(work, "SET TRANSACTION SNAPSHOT '"+res.SnapshotName+"'"); err != nil {
		return fmt.Errorf("synchro: import snapshot: %w", err)
	}
	// Staging a large table takes long: watched like a materialization.
	r.live.applyPID.Store(conn.PgConn().PID())
	r.live.beat(LoopApplier)
	r.live.idle(LoopSession)
	defer func() { r.live.applyPID.Store(0); r.live.idle(LoopApplier); r.live.beat(LoopSession) }()
	n, err := gen.New(tx).RunnerBootstrapStage(work, gen.RunnerBootstrapStageParams{ConsistentPoint: cp.String(), SlotName: slot})
	if err != nil {
		return fmt.Errorf("synchro: runner_bootstrap_stage: %w", err)
	}
	r.cfg.faults.Reach(fault.BootstrapStaging)
	if err = tx.Commit(work); err != nil {
		return fmt.Errorf("synchro: commit bootstrap stage: %w", err)
	}
	r.cfg.faults.Reach(fault.BootstrapStaged)
	log.Info("projection bootstrap staged under the exported snapshot: the main worker merges it at the consistent point",
		"staged", n, "consistent_point", cp, "took", time.Since(began).Round(time.Millisecond))
	return nil
}

// bootstrapVersions gives every row of the relation a row version, chunk by chunk.
// A chunk that meets a row a writer holds gives up at once (lock_timeout, 55P03)
// and is tried again: the writer never waits for it.
func (r *Runner) bootstrapVersions(ctx context.Context, conn *pgx.Conn, relationID int64) error {
	var after *string
	busy := 0
	for {
		r.live.beat(LoopSession)
		res, err := gen.New(conn).RunnerBootstrapVersions(ctx, gen.RunnerBootstrapVersionsParams{
			RelationID: relationID, After: after, Chunk: bootstrapVersionChunk})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01") && busy < 1000 {
			busy++
			if !sleep(ctx, 20*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("synchro: runner_bootstrap_versions: %w", err)
		}
		if res.Done {
			return nil
		}
		last := res.Last
		after = &last
	}
}

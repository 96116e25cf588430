-- synchro.materialize_batch: the only path by which a change becomes pull-visible.
--
-- The runner stages a batch of consecutive committed source transactions in
-- pg_temp.synchro_stage (txn = 0, 1, ... in commit order) and calls this once, in the
-- batch's database transaction; it commits right after. Array element i + 1 describes
-- transaction i. Each source transaction keeps its own replay identity, events,
-- effects at its own commit position, registry generation per event and fence
-- reconciliation; the result equals materializing them one at a time (ADR 001;
-- tests/batch_test.go compares the two byte for byte).
--
-- Runs of consecutive ordinary transactions (synced and dependency rows only, no
-- registry activation, no TRUNCATE, no unchanged-TOAST column) go through the set-based path,
-- synchro._materialize_run, one statement per phase for the whole run. Any other
-- transaction goes alone through synchro._materialize_txn. set_based = false sends
-- every transaction alone: the runner does that when it re-runs a failed batch one
-- transaction at a time, so that a poison is quarantined with its own identity and
-- the exact class the reference path gives it.
--
-- Returns one outcome per transaction: 'materialized' or 'duplicate' (already durable:
-- a replay after a crash; nothing written).
CREATE OR REPLACE FUNCTION synchro.materialize_batch(
  stream_generation bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[], commit_times timestamptz[],
  set_based boolean)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Row images render the same whatever the server's defaults.
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
-- No JIT: its compilation is paid per statement, and every statement here is short. The
-- cost estimates that would trigger it are not real ones: synchro._materialize_run turns
-- nested loops off, and a lateral probe that can only be a nested loop then carries
-- the planner's disable cost (1e10), far above jit_above_cost: one second of
-- compilation for a 1,000-row transaction.
SET jit TO off
-- Each statement planned once per session. PL/pgSQL kept re-planning most of them on
-- every call (custom plans: the planner's generic estimates were no cheaper): a third
-- of a one-transaction batch's apply time was the planner (perf), and the lag and
-- headroom benchmarks are made of such batches. The generic plans are safe to keep:
-- the set-based run's joins of work tables are hash joins (synchro._materialize_run).
SET plan_cache_mode TO force_generic_plan
-- Every read of a permanent table here is an index probe by design: no sequential scan
-- where an index serves, whatever the statistics say. A plan made while a table was
-- nearly empty (or analyzed so) took a sequential scan as the cheaper probe and, once
-- the table had grown, read all of it once per row: 78 million tuples of
-- synchro.rule_value for a backlog of 12,000 one-row transactions on a loaded machine
-- (TestMaterializePlansFollowGrowth); planning again as the tables grew did not stop it,
-- since plans made again from stale statistics still chose the scan. Work tables
-- without an index keep their scans.
SET enable_seqscan TO off
AS $$
DECLARE
  outcomes text[];
BEGIN
  PERFORM synchro._batch_arrays_check('materialize_batch', commit_lsns, end_lsns, xids, commit_times);
  IF set_based IS NULL THEN
    RAISE EXCEPTION 'materialize_batch: set_based must not be null' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- The session's work tables are the owner's own, checked on every call, not only when
  -- the session opened them: a session can drop every temporary object it holds,
  -- whoever owns it (DISCARD TEMP), then make synchro_ tables of its own with triggers
  -- that the writes below would fire with the owner's rights. runner_stage_open refuses
  -- such tables (42501) and recreates dropped ones.
  PERFORM synchro.runner_stage_open();
  -- Every source transaction of the batch is visible first (synchro._await_visible):
  -- a transaction is decoded once its commit record is flushed, a moment before it
  -- leaves the proc array. Checked before the reset guard, which must see the
  -- begin_reset that is in this very batch: read too early, the guard let that
  -- transaction materialize on the old stream, and an idle stream then never reached
  -- the reset (it stayed 'requested' until the next write).
  PERFORM synchro._await_visible_all(xids);
  -- An open stream reset blocks every generation but its own target.
  PERFORM synchro._reset_guard(stream_generation);
  -- Only the pack's own messages are staged: the runner parses each strictly and
  -- checks its MAC under the server key before staging it (runner/msgauth), and drops
  -- every other one, as if it had never been emitted.
  -- Projection bootstrap catch-up (synchro._bootstrap_catch_up), the part both paths
  -- share: for a bootstrap staged under a snapshot whose activation is materialized
  -- already, a transaction of this batch that committed before the consistent point is
  -- in the snapshot: its events and fences of the relation go before anything else.
  IF EXISTS (SELECT 1 FROM synchro.bootstrap x WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase = 'staged') THEN
    DELETE FROM pg_temp.synchro_stage s
     USING (SELECT x.relation_id, r.relid, x.consistent_point
              FROM synchro.bootstrap x JOIN synchro.relation r USING (relation_id)
             WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase = 'staged'
               AND x.stream_generation = materialize_batch.stream_generation
               AND x.generation <= (SELECT p.registry_generation FROM synchro.progress p)) b
     WHERE commit_lsns[s.txn + 1] < b.consistent_point
       AND ((s.kind IN ('I', 'U', 'D') AND s.relid = b.relid)
         OR (s.kind = 'M' AND s.prefix = 'synchro.fence' AND s.f_relation_id = b.relation_id));
  END IF;
  outcomes := synchro._materialize_from(0, stream_generation, commit_lsns, end_lsns, xids, commit_times, set_based);
  -- Empty the session's work tables for the next batch (they keep rows across
  -- commits: runner_stage_open).
  PERFORM synchro._stage_reset(-1);
  RETURN outcomes;
END
$$;

REVOKE ALL ON FUNCTION synchro.materialize_batch(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.materialize_batch(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean) TO synchro_runner;

-- synchro.materialize_prepare: the first half of a pipelined materialization batch
-- (docs/architecture.md, "Two apply sessions"). The runner's second apply session calls
-- it for batch N+1 while the first still writes batch N, then commits; it calls
-- synchro.materialize_write for the same batch once batch N has committed. What it does
-- needs only the staged batch and a registry generation: validate the relations, pair
-- the fences and render the row images (synchro._mat_run_prepare), into the session's
-- work tables, which keep their rows across the commit between the two calls
-- (runner_stage_open). It writes nothing durable and takes no lock that a writer of
-- the synchro tables waits for, so the session can hold what it prepared while it
-- waits for the batch before.
--
-- It prepares the batch's leading run of transactions the set-based path takes: the
-- whole batch, or the transactions before the first one that must go alone (a registry
-- activation, a dependency change, a TRUNCATE, an unchanged out-of-line value; the
-- runner ends a pipelined batch right after such a transaction, so that the rest of
-- the batch is that run). Returns the registry generation it prepared under, or NULL
-- when it prepared nothing: the batch starts with a transaction that goes alone, a
-- projection bootstrap is not merged, a transaction is replayed, or any failure. Failures
-- are not judged here: the registry and the stream position may still change before
-- the batch's turn, so materialize_write runs synchro.materialize_batch on the same
-- staged batch instead, which judges them as an unpipelined batch would.
CREATE OR REPLACE FUNCTION synchro.materialize_prepare(
  stream_generation bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[], commit_times timestamptz[])
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The row images are rendered here: the settings of synchro.materialize_batch, which
-- says why each is pinned.
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
SET jit TO off
SET plan_cache_mode TO force_generic_plan
SET enable_seqscan TO off
-- Hash joins only, as in synchro._materialize_run (it says why): everything here is
-- its prepare half.
SET enable_nestloop TO off
SET enable_mergejoin TO off
AS $$
DECLARE
  gen   bigint := materialize_prepare.stream_generation;
  n     int;
  p     record;
  reg   bigint;
  pos   record;
  k     int;
BEGIN
  n := synchro._batch_arrays_check('materialize_prepare', commit_lsns, end_lsns, xids, commit_times);
  -- The work tables are the owner's own (synchro.materialize_batch says why this is
  -- checked on every call).
  PERFORM synchro.runner_stage_open();
  PERFORM synchro._await_visible_all(xids);
  -- While a projection bootstrap is not merged, or a relation is owed a later one
  -- (synchro._bootstrap_owed), materialize_batch may drop staged events or take
  -- transactions alone: not prepared.
  IF EXISTS (SELECT 1 FROM synchro.bootstrap x WHERE x.merged_at IS NULL AND x.kind = 'project'
                                                  AND x.phase NOT IN ('merged', 'subsumed'))
     OR EXISTS (SELECT 1 FROM synchro.progress x
                 WHERE cardinality(synchro._bootstrap_owed(x.stream_generation, x.registry_generation)) > 0) THEN
    RETURN NULL;
  END IF;
  -- The leading run: transactions 0 .. k - 1.
  SELECT coalesce(min(a), n) INTO k FROM unnest(synchro._mat_batch_alone()) a;
  IF k = 0 THEN
    RETURN NULL;
  END IF;
  -- Read without a lock: the batch before may still be writing the row. What it
  -- changes is checked again by materialize_write under the row's lock.
  SELECT x.* INTO p FROM synchro.progress x;
  IF NOT FOUND OR p.stream_generation <> gen OR p.registry_generation IS NULL THEN
    RETURN NULL;
  END IF;
  reg := p.registry_generation;
  BEGIN
    SELECT * INTO pos
      FROM synchro._mat_run_position(0, k - 1, gen, p.materialized_commit_lsn, p.generation_start_lsn,
                                     p.processed_end_lsn, commit_lsns, end_lsns, xids, commit_times);
    IF pos.n_new <> k THEN
      -- A replayed transaction: the sequential path knows its outcome.
      RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'replay';
    END IF;
    PERFORM synchro._mat_run_prepare(0, k - 1, reg, pos.n_ev, pos.n_fence);
  EXCEPTION WHEN OTHERS THEN
    -- Not judged here (above). The block's work-table rows are rolled back. The
    -- SQLSTATE only, for a server at log_min_messages = debug1: never a value.
    RAISE DEBUG 'synchro: materialize_prepare prepared nothing (SQLSTATE %)', SQLSTATE;
    RETURN NULL;
  END;
  RETURN reg;
END
$$;

REVOKE ALL ON FUNCTION synchro.materialize_prepare(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.materialize_prepare(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) TO synchro_runner;

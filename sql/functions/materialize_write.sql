-- synchro.materialize_write: the second half of a pipelined materialization batch
-- (synchro.materialize_prepare has the first). The runner calls it in the batch's own
-- database transaction once the batch before has committed, and commits right after;
-- prepared is what materialize_prepare returned for the same staged batch.
--
-- Under the progress row's lock it checks what the batch before may have changed since
-- the batch was prepared: the stream and registry generations, the stream position
-- (serial commit order after the durable high-watermark), an open stream reset, a
-- projection bootstrap. If all hold, it writes the prepared run (the batch's first k
-- transactions) from the prepared work tables (synchro._mat_run_write), then the rest of
-- the batch as materialize_batch would (synchro._materialize_from k): the same writes as
-- synchro.materialize_batch, since the prepared half depends only on the batch and the
-- registry generation (TestBatchInvariant, tests/batch_test.go, compares them byte for
-- byte). Otherwise, and when nothing was prepared, it empties the work tables and runs
-- synchro.materialize_batch on the same staged batch. Returns one outcome per transaction, as materialize_batch, and
-- whether it wrote from what was prepared (the runner counts those: a fallback taken
-- every time would cost the overlap silently).
CREATE OR REPLACE FUNCTION synchro.materialize_write(
  stream_generation bigint, prepared bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[],
  commit_times timestamptz[], OUT outcomes text[], OUT from_prepared boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The settings of synchro.materialize_batch, which says why each is pinned.
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
SET jit TO off
SET plan_cache_mode TO force_generic_plan
SET enable_seqscan TO off
AS $$
DECLARE
  gen       bigint := materialize_write.stream_generation;
  n         int;
  p         record;
  f         record;
  k         int;
  nestloop  text;
  mergejoin text;
BEGIN
  n := synchro._batch_arrays_check('materialize_write', commit_lsns, end_lsns, xids, commit_times);
  PERFORM synchro.runner_stage_open();
  IF prepared IS NOT NULL THEN
    -- An open stream reset blocks every generation but its own target.
    PERFORM synchro._reset_guard(gen);
    SELECT x.* INTO p FROM synchro.progress x FOR UPDATE;
    -- The prepared work tables hold a leading run of the batch, 0 .. k - 1
    -- (materialize_prepare filled them in this session for these transactions, all of
    -- them new), the generations are still those it prepared under, and no projection
    -- bootstrap appeared since.
    IF FOUND AND p.stream_generation = gen AND p.registry_generation = prepared
       AND (SELECT count(*) = max(b.t) + 1 AND min(b.t) = 0 AND max(b.t) < n FROM pg_temp.synchro_b_txn b)
       AND NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_txn b
                        WHERE b.commit_lsn IS DISTINCT FROM commit_lsns[b.t + 1] OR b.end_lsn IS DISTINCT FROM end_lsns[b.t + 1]
                           OR b.xid IS DISTINCT FROM xids[b.t + 1] OR b.commit_time IS DISTINCT FROM commit_times[b.t + 1])
       AND NOT EXISTS (SELECT 1 FROM synchro.bootstrap x WHERE x.merged_at IS NULL AND x.kind = 'project'
                                                  AND x.phase NOT IN ('merged', 'subsumed'))
       AND cardinality(synchro._bootstrap_owed(gen, p.registry_generation)) = 0 THEN
      nestloop := current_setting('enable_nestloop');
      mergejoin := current_setting('enable_mergejoin');
      PERFORM set_config('enable_nestloop', 'off', true), set_config('enable_mergejoin', 'off', true);
      -- Checked again with the positions the batch before left: SYB01 if out of order.
      PERFORM synchro._mat_run_order(p.materialized_commit_lsn, p.generation_start_lsn, p.processed_end_lsn);
      -- The flags of synchro._mat_run_links, read back from the links it wrote.
      SELECT (SELECT count(*)::int FROM pg_temp.synchro_b_rows) AS n_rows,
             coalesce(max(l.link) > 1, false) AS multi,
             coalesce(bool_or(l.last AND l.op = 'delete'), false) AS deletes,
             coalesce(bool_or(l.last AND l.op <> 'delete' AND NOT l.fresh), false) AS anyknown
        INTO f FROM pg_temp.synchro_b_links l;
      SELECT count(*) INTO k FROM pg_temp.synchro_b_txn;
      PERFORM synchro._mat_run_write(gen, prepared, f.n_rows, f.multi, f.deletes, f.anyknown);
      PERFORM synchro._mat_run_clear();
      PERFORM set_config('enable_nestloop', nestloop, true), set_config('enable_mergejoin', mergejoin, true);
      outcomes := array_fill('materialized'::text, ARRAY[k]);
      IF k < n THEN
        outcomes := outcomes || synchro._materialize_from(k, gen, commit_lsns, end_lsns, xids, commit_times, true);
      END IF;
      PERFORM synchro._stage_reset(-1);
      from_prepared := true;
      RETURN;
    END IF;
  END IF;
  PERFORM synchro._mat_run_clear();
  outcomes := synchro.materialize_batch(gen, commit_lsns, end_lsns, xids, commit_times, true);
  from_prepared := false;
END
$$;

REVOKE ALL ON FUNCTION synchro.materialize_write(bigint, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.materialize_write(bigint, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) TO synchro_runner;

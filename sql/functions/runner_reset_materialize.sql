-- The catch-up of a reset: materializes a batch of the candidate slot's source
-- transactions (staged by the runner in pg_temp.synchro_stage exactly as for the
-- stream) into the reset's staged state, by the ordinary code: synchro.materialize_batch
-- for the target generation, run while synchro._reset_swap puts the staged tables under
-- the live names. The fences it reconciles stay pending (coverage NULL) until
-- activation: staged coverage must not clear capture_pending. When the batch holds the
-- marker transaction (synchro.runner_reset_mark), its end LSN becomes the activation
-- barrier; the runner never materializes past it. Returns materialize_batch's outcomes.
CREATE OR REPLACE FUNCTION synchro.runner_reset_materialize(
  reset_id uuid, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[], commit_times timestamptz[], set_based boolean)
RETURNS text[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r        synchro.reset;
  outcomes text[];
  i        int;
  xmax     numeric := pg_snapshot_xmax(pg_current_snapshot())::text::numeric;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_materialize.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'catching_up' OR r.activation_barrier IS NOT NULL THEN
    RAISE EXCEPTION 'reset catch-up refused in phase % (or past the barrier)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro._reset_swap(true);
  outcomes := synchro.materialize_batch(r.target_generation, commit_lsns, end_lsns, xids, commit_times, set_based);
  PERFORM synchro._reset_swap(false);

  UPDATE synchro.write_fence f SET coverage = NULL, covered_at = NULL
   WHERE f.coverage = 'wal'
     AND f.fence_id IN (SELECT e.fence_id FROM synchro.event e
                         WHERE e.stream_generation = r.target_generation AND e.commit_lsn = ANY (commit_lsns));

  IF r.barrier_xid IS NOT NULL THEN
    FOR i IN 1 .. cardinality(xids) LOOP
      IF synchro._full_xid(xids[i], xmax) = r.barrier_xid THEN
        IF i <> cardinality(xids) THEN
          RAISE EXCEPTION 'reset catch-up refused: a batch must end at the barrier transaction' USING ERRCODE = 'SY400';
        END IF;
        UPDATE synchro.reset x SET activation_barrier = end_lsns[i] WHERE x.reset_id = r.reset_id;
      END IF;
    END LOOP;
  END IF;
  RETURN outcomes;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_materialize(uuid, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_materialize(uuid, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean) TO synchro_runner;

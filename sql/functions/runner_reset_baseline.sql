-- Stages a reset's baseline rows. Called inside the REPEATABLE READ transaction that
-- imported the candidate slot's exported snapshot (the creating replication connection
-- still open), so that everything is read as of the slot's consistent point: the
-- registered and capture-dependency rows with their row versions, by the first start's
-- code (synchro._baseline_rows) into the staged tables of schema synchro_reset, and the
-- staged progress row whose generation_start is the consistent point. Every accepted
-- push fence visible in the snapshot gets its immutable reset_baseline coverage record.
-- The phase stays staging, with the consistent point recorded: the runner indexes the
-- rows next (synchro.runner_reset_index), which needs no snapshot and resumes after a
-- process death.
CREATE OR REPLACE FUNCTION synchro.runner_reset_baseline(reset_id uuid, slot_name text, consistent_point pg_lsn)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Reads registered tables planned as the owner: no CHECK constraint of theirs folded
-- (synchro._planned_app_code).
SET constraint_exclusion TO 'partition'
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
AS $$
DECLARE
  r    synchro.reset;
  reg  bigint;
  snap pg_snapshot := pg_current_snapshot();
  t    text;
BEGIN
  IF current_setting('transaction_isolation') <> 'repeatable read' THEN
    RAISE EXCEPTION 'reset baseline refused: run it in the REPEATABLE READ transaction that imported the slot snapshot'
      USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_baseline.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'staging' OR r.candidate_slot IS DISTINCT FROM runner_reset_baseline.slot_name THEN
    RAISE EXCEPTION 'reset baseline refused in phase % (or for another candidate slot)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro.runner_stage_open();
  -- The registry generation in effect at the snapshot (activation commits with it).
  SELECT g.generation INTO reg FROM synchro.registry_generation g WHERE g.state = 'active';

  -- The rows only, straight into the stage: the live tables' names are never taken
  -- in this long transaction (pull, rebuild, readiness and the heartbeat read them).
  -- Rule index and membership follow in short chunks (synchro.runner_reset_index).
  PERFORM synchro._reset_stage_tables();
  PERFORM synchro._baseline_rows(reg, 'synchro_reset');
  -- One byte before the consistent point: a commit right at it is the catch-up's
  -- (synchro.runner_baseline says why).
  INSERT INTO synchro_reset.progress (stream_generation, generation_start_lsn, processed_end_lsn, registry_generation)
  VALUES (r.target_generation, consistent_point - 1, consistent_point, reg);
  -- Statistics for the indexing and the catch-up's index probes.
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    EXECUTE format('ANALYZE synchro_reset.%I', t);
  END LOOP;

  INSERT INTO synchro.reset_baseline (reset_id, fence_id, candidate_slot, snapshot_boundary, target_generation)
  SELECT r.reset_id, f.fence_id, r.candidate_slot, snap, r.target_generation FROM synchro.write_fence f;

  UPDATE synchro.reset x
     SET consistent_point = runner_reset_baseline.consistent_point, snapshot_boundary = snap,
         index_step = 'rules', index_rel = NULL, index_pk = NULL
   WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_baseline(uuid, text, pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_baseline(uuid, text, pg_lsn) TO synchro_runner;

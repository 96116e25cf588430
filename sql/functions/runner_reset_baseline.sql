-- Stages a reset's baseline. Called inside the REPEATABLE READ transaction that
-- imported the candidate slot's exported snapshot (the creating replication connection
-- still open), so that everything is read as of the slot's consistent point: the
-- registered and capture-dependency projections with their row versions, rule index and
-- membership, by the same code as the first start's baseline (synchro._baseline_project)
-- run on the staged tables (synchro._reset_swap), and the staged progress row whose
-- generation_start is the consistent point. Every accepted push fence visible in the
-- snapshot gets its immutable reset_baseline coverage record. Phase catching_up.
CREATE OR REPLACE FUNCTION synchro.runner_reset_baseline(reset_id uuid, slot_name text, consistent_point pg_lsn)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
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

  PERFORM synchro._reset_stage_tables();
  PERFORM synchro._reset_swap(true);
  PERFORM synchro._baseline_project(reg);
  INSERT INTO synchro.progress (stream_generation, generation_start_lsn, processed_end_lsn, registry_generation)
  VALUES (r.target_generation, consistent_point, consistent_point, reg);
  PERFORM synchro._reset_swap(false);
  PERFORM synchro._stage_reset(true);
  -- Statistics for the catch-up's index probes.
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    EXECUTE format('ANALYZE synchro_reset.%I', t);
  END LOOP;

  INSERT INTO synchro.reset_baseline (reset_id, fence_id, candidate_slot, snapshot_boundary, target_generation)
  SELECT r.reset_id, f.fence_id, r.candidate_slot, snap, r.target_generation FROM synchro.write_fence f;

  UPDATE synchro.reset x
     SET phase = 'catching_up', consistent_point = runner_reset_baseline.consistent_point,
         snapshot_boundary = snap, staged_at = now()
   WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_baseline(uuid, text, pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_baseline(uuid, text, pg_lsn) TO synchro_runner;

-- First start: materializes the baseline of the rows already in registered tables and
-- creates stream generation 1. Called inside the REPEATABLE READ transaction that
-- imported the new slot's exported snapshot: live tables and row versions are read as
-- of the slot's consistent point, so the baseline joins the WAL stream with no gap and
-- no overlap. The baseline is generation_start; clients receive it through rebuild.
-- Push fences visible in the snapshot are covered by it ('baseline' coverage).
CREATE OR REPLACE FUNCTION synchro.runner_baseline(slot_name text, plugin text, consistent_point pg_lsn)
RETURNS bigint
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
  reg bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'repeatable read' THEN
    RAISE EXCEPTION 'baseline refused: run it in the REPEATABLE READ transaction that imported the slot snapshot'
      USING ERRCODE = 'SY400';
  END IF;
  IF EXISTS (SELECT 1 FROM synchro.progress) THEN
    RAISE EXCEPTION 'baseline refused: a stream generation exists already' USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro.runner_stage_open();
  SELECT generation INTO reg FROM synchro.registry_generation WHERE state = 'active';

  PERFORM synchro._baseline_project(reg);

  -- Push fences visible in the snapshot are represented by this baseline.
  UPDATE synchro.write_fence SET coverage = 'baseline', covered_at = now() WHERE coverage IS NULL;

  -- generation_start is one byte before the consistent point: a commit record that
  -- starts right at it is decoded (the slot skips only commits before it) and is not
  -- in the snapshot, and every check, cursor and checkpoint reads the generation's
  -- commits as those after generation_start (TestResetEdgeWritersAndPushesAcrossReset
  -- met one at a reset's barrier and quarantined it as stream_order). The slot is at
  -- the consistent point, which is the acknowledgement the stream starts from.
  INSERT INTO synchro.stream_generation (stream_generation, slot_name, plugin, database_name, generation_start_lsn, state)
  VALUES (1, slot_name, plugin, current_database(), consistent_point - 1, 'active');
  INSERT INTO synchro.progress (stream_generation, generation_start_lsn, processed_end_lsn, acknowledged_end_lsn, registry_generation)
  VALUES (1, consistent_point - 1, consistent_point, consistent_point, reg);
  PERFORM synchro._stage_reset(NULL);
  -- The registry lock, held to this transaction's end: no activation commits from here
  -- until the stream exists. One that committed after the snapshot (so after the slot's
  -- consistent point) found no stream and requested no projection bootstrap, and this
  -- baseline, read under the older snapshot, holds nothing of it: its new relation's
  -- rows were never projected (TestBaselineRacesActivation). The runner compares the
  -- generation seen here with the latest one, read on another connection, before it
  -- commits, and starts over with a new slot when they differ.
  -- Through synchro._registry_lock, which also writes the registry clock: an activation
  -- at REPEATABLE READ whose snapshot predates this commit read "no stream yet" and
  -- requested no projection bootstrap, its table's rows in neither the baseline nor a
  -- bootstrap (TestRegistryRepeatableReadActivationAfterFirstStart, found by review
  -- 2026-12-05); it fails with 40001 now and is retried whole. The baseline itself
  -- fails so (and the runner starts over) when a registry change committed after its
  -- snapshot, which the check above would have sent back anyway if it was an activation.
  PERFORM synchro._registry_lock();
  RETURN 1;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_baseline(text, text, pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_baseline(text, text, pg_lsn) TO synchro_runner;

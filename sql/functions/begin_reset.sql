-- Operator: requests an operator-authorized stream reset (ADR 001). From its commit on,
-- the old stream stays blocked (synchro._reset_guard: nothing new materializes from
-- the old slot) until activate_reset or abort_reset. The runner does the
-- replication-protocol part: a permanent candidate slot with an exported snapshot, the
-- staged baseline under it, the catch-up to an activation barrier (phases staging,
-- catching_up, ready; synchro.reset_status). The reason is kept for the audit trail:
-- 1 to 200 characters, never sent anywhere else.
CREATE OR REPLACE FUNCTION synchro.begin_reset(reason text) RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p      record;
  cur    record;
  target bigint;
  id     uuid;
BEGIN
  IF reason IS NULL OR length(reason) < 1 OR length(reason) > 200 THEN
    RAISE EXCEPTION 'begin_reset: reason must be 1 to 200 characters' USING ERRCODE = 'SY400';
  END IF;
  -- The registry lock first (synchro._registry_lock; activate_registry takes it
  -- first too, so the two never wait on each other in the other order): a registry
  -- activation in flight commits before the reset exists, and one whose snapshot
  -- predates this commit fails with 40001 instead of reading "no reset open". Without
  -- it an activation at REPEATABLE READ went through while this reset was open and its
  -- new table's rows were in neither stream, and one still uncommitted here failed the
  -- reset's staging (TestResetRacesRegistryActivation, found by review 2026-12-05).
  PERFORM synchro._registry_lock();
  -- The progress row lock waits for a materialization in flight: the old stream's
  -- last batch commits before the reset exists, or sees it and refuses.
  SELECT pr.stream_generation, g.slot_name INTO p
    FROM synchro.progress pr JOIN synchro.stream_generation g USING (stream_generation)
     FOR UPDATE OF pr;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'begin_reset: no stream exists yet (the runner makes the first one)' USING ERRCODE = 'SY400';
  END IF;
  SELECT r.reset_id, r.phase INTO cur FROM synchro.reset r
   WHERE r.phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed');
  IF FOUND THEN
    RAISE EXCEPTION 'begin_reset: a reset is open already (phase %)', cur.phase USING ERRCODE = 'SY400';
  END IF;
  -- Target generations are never reused, not even those of aborted resets.
  SELECT greatest((SELECT max(g.stream_generation) FROM synchro.stream_generation g),
                  (SELECT max(r.target_generation) FROM synchro.reset r)) + 1 INTO target;
  -- Under REPEATABLE READ or SERIALIZABLE the check above reads the caller's snapshot,
  -- which can predate another operator's reset committed since: the unique indexes
  -- (one open reset, target generations never reused) then refuse the insert, and that
  -- is the same refusal.
  BEGIN
    INSERT INTO synchro.reset (reason, phase, source_generation, target_generation, retired_slot)
    VALUES (reason, 'requested', p.stream_generation, target, p.slot_name)
    RETURNING reset_id INTO id;
  EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'begin_reset: a reset is open already (begun after this transaction''s snapshot)'
      USING ERRCODE = 'SY400';
  END;
  -- A transaction on the old slot: a runner streaming an idle old stream reaches
  -- materialize_batch, which the reset now refuses, and turns to the reset at once.
  -- Outside the pack's "synchro." prefixes: never staged.
  PERFORM pg_logical_emit_message(true, 'synchro_reset_requested', id::text);
  RETURN id;
END
$$;

REVOKE ALL ON FUNCTION synchro.begin_reset(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.begin_reset(text) TO synchro_operator;

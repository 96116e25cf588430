-- Operator: discards a reset that has not activated (any phase but activated and
-- aborted): the staged tables and the target generation's staged replay rows go now,
-- the candidate slot with the runner's cleanup. The old stream stays as it was,
-- still blocked if a poison blocked it; it resumes when the runner next loops.
CREATE OR REPLACE FUNCTION synchro.abort_reset(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.reset;
BEGIN
  -- The row lock serializes with the runner's staging and catch-up transactions,
  -- which lock it too and check the phase again.
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = abort_reset.reset_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'abort_reset: unknown reset_id' USING ERRCODE = 'SY400';
  END IF;
  IF r.phase IN ('activated', 'aborted') THEN
    RAISE EXCEPTION 'abort_reset: refused in phase %', r.phase USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro._reset_discard(r.reset_id);
  UPDATE synchro.reset x SET phase = 'aborted', ended_at = now() WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.abort_reset(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.abort_reset(uuid) TO synchro_operator;

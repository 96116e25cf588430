-- Controlled cleanup after a reset ended, once the runner dropped the slot that ended
-- with it (the old stream's slot after an activation, the candidate after an abort):
-- the retired projections of an activation (kept until the activation was durable) and
-- the retired generation's pull effects go, or an aborted stage's leftovers.
CREATE OR REPLACE FUNCTION synchro.runner_reset_cleaned(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.reset;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_cleaned.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase NOT IN ('activated', 'aborted') OR r.cleaned_at IS NOT NULL THEN
    RAISE EXCEPTION 'runner_reset_cleaned: refused in phase %', coalesce(r.phase, 'unknown') USING ERRCODE = 'SY400';
  END IF;
  IF r.phase = 'activated' THEN
    PERFORM synchro._reset_drop_tables('synchro_retired');
    DELETE FROM synchro.effect e WHERE e.stream_generation = r.source_generation;
  ELSE
    PERFORM synchro._reset_discard(r.reset_id);
  END IF;
  UPDATE synchro.reset x SET cleaned_at = now() WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_cleaned(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_cleaned(uuid) TO synchro_runner;

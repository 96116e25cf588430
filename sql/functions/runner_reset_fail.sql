-- Phase failed: staging or catch-up hit a blocking failure (class: a bounded failure
-- class, as in quarantine). The old stream stays blocked and no active state changes;
-- the operator aborts the reset (and may begin another).
CREATE OR REPLACE FUNCTION synchro.runner_reset_fail(reset_id uuid, failure_class text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF failure_class IS NULL OR failure_class !~ '^[a-z0-9_]{1,48}$' THEN
    RAISE EXCEPTION 'runner_reset_fail: failure_class must match ^[a-z0-9_]{1,48}$' USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.reset x SET phase = 'failed', ended_at = now(), detail = failure_class
   WHERE x.reset_id = runner_reset_fail.reset_id AND x.phase IN ('requested', 'staging', 'catching_up');
  IF NOT FOUND THEN
    RAISE EXCEPTION 'runner_reset_fail: no such reset in a running phase' USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_fail(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_fail(uuid, text) TO synchro_runner;

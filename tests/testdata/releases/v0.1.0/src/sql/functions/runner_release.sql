-- A clean stop: the claim's advisory lock is released and the runner row says stopped,
-- so readiness reports "no worker" at once instead of waiting for a stale heartbeat.
CREATE OR REPLACE FUNCTION synchro.runner_release() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE synchro.runner SET state = 'stopped', heartbeat_at = now() WHERE backend_pid = pg_backend_pid();
  PERFORM pg_advisory_unlock(hashtextextended('synchro.runner', synchro._lock_seed()));
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_release() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_release() TO synchro_runner;

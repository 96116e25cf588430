-- The runner's heartbeat: proves a live runner owns the stream and copies its in-memory
-- positions (at or before durable progress) for readiness.
CREATE OR REPLACE FUNCTION synchro.runner_heartbeat(received_lsn pg_lsn, state text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  -- Called on the claiming (control) session only.
  UPDATE synchro.runner r
     SET heartbeat_at = now(), received_lsn = runner_heartbeat.received_lsn, state = left(runner_heartbeat.state, 32),
         registry_generation = (SELECT p.registry_generation FROM synchro.progress p),
         materialized_commit_lsn = (SELECT p.materialized_commit_lsn FROM synchro.progress p)
   WHERE r.backend_pid = pg_backend_pid();
  IF NOT FOUND THEN
    RAISE EXCEPTION 'heartbeat refused: this session does not own the runner claim' USING ERRCODE = 'object_in_use';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_heartbeat(pg_lsn, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_heartbeat(pg_lsn, text) TO synchro_runner;

-- Claims the runner role of this database for the calling session: a session-level
-- advisory lock that dies with the connection, so a crashed runner never blocks its
-- successor and two runners never consume one stream. The key is hashed with the
-- install's secret (synchro._lock_seed), so no other role can hold it by guessing.
-- Records the runner's settings so readiness needs nothing but this database, its
-- decoder (output plugin) included: readiness compares it with the stream's plugin.
CREATE OR REPLACE FUNCTION synchro.runner_claim(
  owner text, pid int, slot_name text, publication text, heartbeat_interval interval, decoder text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  active_slot text;
BEGIN
  IF NOT pg_try_advisory_lock(hashtextextended('synchro.runner', synchro._lock_seed())) THEN
    RAISE EXCEPTION 'runner refused: another runner is active for this database' USING ERRCODE = 'object_in_use';
  END IF;
  -- Fail closed: a runner reading another publication than the one the registry
  -- keeps would see none of the registered relations' changes.
  IF publication IS DISTINCT FROM (SELECT value FROM synchro.setting WHERE name = 'publication') THEN
    RAISE EXCEPTION 'runner refused: the publication is not the one the registry keeps (synchro.setting publication)'
      USING ERRCODE = 'SY400';
  END IF;
  IF heartbeat_interval IS NULL OR heartbeat_interval <= interval '0' OR heartbeat_interval > interval '1 hour' THEN
    RAISE EXCEPTION 'runner refused: heartbeat_interval must be positive and at most one hour' USING ERRCODE = 'SY400';
  END IF;
  IF decoder IS NULL OR decoder !~ '^[a-z0-9_]{1,63}$' THEN
    RAISE EXCEPTION 'runner refused: decoder must be an output plugin name' USING ERRCODE = 'SY400';
  END IF;
  -- After a stream reset the runner reads the slot the durable active-slot pointer
  -- names (the activated candidate), not the configured one: that is what it records.
  SELECT coalesce((SELECT g.slot_name FROM synchro.stream_generation g JOIN synchro.reset x
                      ON x.target_generation = g.stream_generation AND x.phase = 'activated'
                    WHERE g.state = 'active'), runner_claim.slot_name)
    INTO active_slot;
  INSERT INTO synchro.runner AS r (singleton, owner, pid, backend_pid, slot_name, publication, database_name,
                                   started_at, heartbeat_at, heartbeat_interval, state, decoder)
  VALUES (true, left(owner, 200), pid, pg_backend_pid(), active_slot, publication, current_database(),
          now(), now(), heartbeat_interval, 'starting', decoder)
  ON CONFLICT (singleton) DO UPDATE
    SET owner = excluded.owner, pid = excluded.pid, backend_pid = excluded.backend_pid,
        slot_name = excluded.slot_name, publication = excluded.publication,
        database_name = excluded.database_name, started_at = excluded.started_at,
        heartbeat_at = excluded.heartbeat_at, heartbeat_interval = excluded.heartbeat_interval,
        registry_generation = NULL, materialized_commit_lsn = NULL, received_lsn = NULL,
        state = excluded.state, decoder = excluded.decoder;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_claim(text, int, text, text, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_claim(text, int, text, text, interval, text) TO synchro_runner;

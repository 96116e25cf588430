-- The runner's heartbeat: proves a live runner owns the stream and copies its in-memory
-- positions (at or before durable progress) for readiness. It also keeps the WAL marks
-- readiness bounds the commit lag with (docs/sql/readiness.md): the current WAL insert
-- position with the time, taken anew once the processed boundary has passed the last one.
CREATE OR REPLACE FUNCTION synchro.runner_heartbeat(received_lsn pg_lsn, state text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  processed pg_lsn;
  wal pg_lsn;
BEGIN
  SELECT p.processed_end_lsn INTO processed FROM synchro.progress p;
  -- Read after now() (the transaction's start): a record inserted at or after this
  -- position was inserted after now(), so the mark never makes the lag look smaller.
  wal := pg_catalog.pg_current_wal_insert_lsn();
  -- Called on the claiming (control) session only.
  UPDATE synchro.runner r
     SET heartbeat_at = now(), received_lsn = runner_heartbeat.received_lsn, state = left(runner_heartbeat.state, 32),
         registry_generation = (SELECT p.registry_generation FROM synchro.progress p),
         materialized_commit_lsn = (SELECT p.materialized_commit_lsn FROM synchro.progress p),
         wal_prev_mark_lsn = CASE WHEN r.wal_mark_lsn IS NOT NULL AND processed >= r.wal_mark_lsn
                                  THEN r.wal_mark_lsn ELSE r.wal_prev_mark_lsn END,
         wal_prev_mark_at  = CASE WHEN r.wal_mark_lsn IS NOT NULL AND processed >= r.wal_mark_lsn
                                  THEN r.wal_mark_at ELSE r.wal_prev_mark_at END,
         wal_mark_lsn = CASE WHEN r.wal_mark_lsn IS NULL OR processed >= r.wal_mark_lsn
                             THEN wal ELSE r.wal_mark_lsn END,
         wal_mark_at  = CASE WHEN r.wal_mark_lsn IS NULL OR processed >= r.wal_mark_lsn
                             THEN now() ELSE r.wal_mark_at END
   WHERE r.backend_pid = pg_backend_pid();
  IF NOT FOUND THEN
    RAISE EXCEPTION 'heartbeat refused: this session does not own the runner claim' USING ERRCODE = 'object_in_use';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_heartbeat(pg_lsn, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_heartbeat(pg_lsn, text) TO synchro_runner;

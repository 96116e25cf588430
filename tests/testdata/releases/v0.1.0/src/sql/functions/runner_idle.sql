-- Records an idle processed boundary: the runner decoded no source transaction up to
-- this WAL position. Never while a poison blocks the stream; never backwards.
CREATE OR REPLACE FUNCTION synchro.runner_idle(boundary pg_lsn) RETURNS pg_lsn
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  result pg_lsn;
BEGIN
  UPDATE synchro.progress p
     SET processed_end_lsn = boundary, updated_at = now()
   WHERE boundary > p.processed_end_lsn
     AND NOT EXISTS (SELECT 1 FROM synchro.quarantine q
                      WHERE q.stream_generation = p.stream_generation AND q.resolved_at IS NULL);
  SELECT processed_end_lsn INTO result FROM synchro.progress;
  RETURN result;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_idle(pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_idle(pg_lsn) TO synchro_runner;

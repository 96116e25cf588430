-- The runner takes the requested projection bootstraps of the active stream generation
-- (docs/bootstrap.md): phase staging, one more attempt. Also the ones a dead runner
-- left in staging (its exported snapshot died with its connection, and its staging
-- transaction rolled back: nothing of it is kept) and a failed attempt's. Returns the
-- (generation, relation_id) pairs to stage, in order; the runner allocates their row
-- versions (synchro.runner_bootstrap_versions), then stages them all under one
-- exported snapshot (synchro.runner_bootstrap_stage).
CREATE OR REPLACE FUNCTION synchro.runner_bootstrap_begin()
RETURNS TABLE (generation bigint, relation_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY
  UPDATE synchro.bootstrap b SET phase = 'staging', attempt = b.attempt + 1, detail = NULL
   WHERE b.kind = 'project' AND b.merged_at IS NULL AND b.phase IN ('requested', 'staging', 'failed')
     AND b.stream_generation = (SELECT p.stream_generation FROM synchro.progress p)
  RETURNING b.generation, b.relation_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_bootstrap_begin() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_bootstrap_begin() TO synchro_runner;

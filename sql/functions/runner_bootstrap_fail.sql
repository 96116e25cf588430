-- A staging attempt failed (docs/bootstrap.md): phase failed with a bounded detail,
-- for synchro.bootstrap_status. The runner tries again with a new snapshot
-- (synchro.runner_bootstrap_begin); until a stage commits, the main worker waits at
-- the activation (SYW01): fail closed, nothing partial is merged.
CREATE OR REPLACE FUNCTION synchro.runner_bootstrap_fail(detail text) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE synchro.bootstrap b
     SET phase = 'failed',
         detail = CASE WHEN runner_bootstrap_fail.detail ~ '^[a-z0-9_ =./]{0,120}$' THEN runner_bootstrap_fail.detail
                       ELSE 'staging_failed' END
   WHERE b.kind = 'project' AND b.phase = 'staging' AND b.merged_at IS NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_bootstrap_fail(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_bootstrap_fail(text) TO synchro_runner;

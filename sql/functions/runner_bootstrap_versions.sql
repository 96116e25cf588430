-- Row versions for the rows of a relation in bootstrap that never passed a fence (a
-- table that held rows when it was registered, or a recreated one), one chunk of keys
-- after key `after` (NULL: from the start) in key order; returns the chunk's last key,
-- NULL when the table is done. Runs after the activation committed, so every later
-- write passes the fence trigger and gets its version there; these short transactions
-- lock no table, and a row a writer holds is never waited for long: lock_timeout ends
-- the chunk (55P03, retried by the runner) instead of letting a writer wait for it, or
-- a deadlock pick the writer. Every row then has a version before the exported
-- snapshot the rows are staged under is taken.
CREATE OR REPLACE FUNCTION synchro.runner_bootstrap_versions(relation_id bigint, after text, chunk int)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Reads registered tables planned as the owner: no CHECK constraint of theirs folded
-- (synchro._planned_app_code).
SET constraint_exclusion TO 'partition'
SET lock_timeout TO '200ms'
AS $$
DECLARE
  r    synchro.relation;
  last text;
BEGIN
  IF chunk IS NULL OR chunk < 1 OR chunk > 100000 THEN
    RAISE EXCEPTION 'runner_bootstrap_versions: chunk out of range' USING ERRCODE = 'SY400';
  END IF;
  SELECT x.* INTO r FROM synchro.relation x WHERE x.relation_id = runner_bootstrap_versions.relation_id;
  IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM synchro.bootstrap b
                               WHERE b.relation_id = r.relation_id AND b.phase = 'staging') THEN
    RAISE EXCEPTION 'runner_bootstrap_versions refused: relation_id % has no bootstrap in staging', runner_bootstrap_versions.relation_id
      USING ERRCODE = 'SY400';
  END IF;
  last := synchro._version_chunk(r.relation_id,
    (SELECT max(b.generation) FROM synchro.bootstrap b WHERE b.relation_id = r.relation_id AND b.phase = 'staging'),
    after, chunk);
  RETURN last;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_bootstrap_versions(bigint, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_bootstrap_versions(bigint, text, int) TO synchro_runner;

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
  -- The SQL below is written for the registered key type (t.key > $2::type, c.k::text):
  -- refused (0A000) if the owner retyped a registered column, which could give its own
  -- type a cast that would run here with the owner's rights (synchro._live_shape_check;
  -- its ACCESS SHARE lock is the one the read takes anyway).
  PERFORM synchro._live_shape_check(r.relation_id,
    (SELECT max(b.generation) FROM synchro.bootstrap b WHERE b.relation_id = r.relation_id AND b.phase = 'staging'));
  -- key_pg_type is one of a fixed set of type names (relation_key_pg_type).
  EXECUTE format(
    'WITH c AS (SELECT t.%1$I AS k FROM ONLY %2$I.%3$I t WHERE $2::%4$s IS NULL OR t.%1$I > $2::%4$s ORDER BY t.%1$I LIMIT $3), '
    '     i AS (INSERT INTO synchro.row_version (relation_id, pk, version) '
    '           SELECT $1, c.k::text, synchro._new_version() FROM c ON CONFLICT DO NOTHING) '
    'SELECT (SELECT c.k FROM c ORDER BY c.k DESC LIMIT 1)::text',
    r.key_column, r.schema_name, r.table_name, r.key_pg_type)
    INTO last USING r.relation_id, after, chunk;
  RETURN last;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_bootstrap_versions(bigint, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_bootstrap_versions(bigint, text, int) TO synchro_runner;

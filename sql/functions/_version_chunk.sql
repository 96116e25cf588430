-- One chunk of row versions for the rows of relation rid that have none: the keys
-- after `after` (NULL: from the start) in key order, at most chunk of them; returns the
-- chunk's last key, NULL when the table is done. The one body of
-- synchro.runner_bootstrap_versions and synchro.runner_reset_versions, which say when
-- and why (and set the lock_timeout it runs under).
CREATE OR REPLACE FUNCTION synchro._version_chunk(rid bigint, reg bigint, after text, chunk int) RETURNS text
LANGUAGE plpgsql
-- No SET clause: called only from the two functions above, which pinned search_path.
AS $$
DECLARE
  r    synchro.relation;
  last text;
BEGIN
  SELECT x.* INTO STRICT r FROM synchro.relation x WHERE x.relation_id = rid;
  -- The SQL below is written for the registered key type (t.key > $2::type, c.k::text):
  -- refused (0A000) if the owner retyped a registered column, which could give its own
  -- type a cast that would run here with the owner's rights (synchro._live_shape_check;
  -- its ACCESS SHARE lock is the one the read takes anyway).
  PERFORM synchro._live_shape_check(rid, reg);
  -- key_pg_type is one of a fixed set of type names (relation_key_pg_type).
  EXECUTE format(
    'WITH c AS (SELECT t.%1$I AS k FROM ONLY %2$I.%3$I t WHERE $2::%4$s IS NULL OR t.%1$I > $2::%4$s ORDER BY t.%1$I LIMIT $3), '
    '     i AS (INSERT INTO synchro.row_version (relation_id, pk, version) '
    '           SELECT $1, c.k::text, synchro._new_version() FROM c ON CONFLICT DO NOTHING) '
    'SELECT (SELECT c.k FROM c ORDER BY c.k DESC LIMIT 1)::text',
    r.key_column, r.schema_name, r.table_name, r.key_pg_type)
    INTO last USING rid, after, chunk;
  RETURN last;
END
$$;

REVOKE ALL ON FUNCTION synchro._version_chunk(bigint, bigint, text, int) FROM PUBLIC;

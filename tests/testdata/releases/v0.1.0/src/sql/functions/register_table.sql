-- Stages a synced registration (client-visible as table_id) in the pending registry
-- generation. Takes effect at synchro.activate_registry().
CREATE OR REPLACE FUNCTION synchro.register_table(relation regclass, table_id text, columns name[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN synchro._stage_registration(relation, 'synced', table_id, columns);
END
$$;

REVOKE ALL ON FUNCTION synchro.register_table(regclass, text, name[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.register_table(regclass, text, name[]) TO synchro_operator;

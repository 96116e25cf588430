-- Stages a capture_dependency registration: captured and projected for membership
-- rules (the `via` of add_scope_rule), never sent to clients, no table_id.
CREATE OR REPLACE FUNCTION synchro.register_dependency(relation regclass, columns name[] DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN synchro._stage_registration(relation, 'capture_dependency', NULL, columns);
END
$$;

REVOKE ALL ON FUNCTION synchro.register_dependency(regclass, name[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.register_dependency(regclass, name[]) TO synchro_operator;

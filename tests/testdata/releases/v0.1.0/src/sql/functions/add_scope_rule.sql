-- A row of table_id belongs to scope scope_prefix || <value of column_name> (no scope
-- when the value is NULL). Staged in the pending generation.
CREATE OR REPLACE FUNCTION synchro.add_scope_rule(table_id text, scope_prefix text, column_name name)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM synchro._stage_scope_rule(table_id, scope_prefix, column_name, NULL, NULL, NULL);
END
$$;

REVOKE ALL ON FUNCTION synchro.add_scope_rule(text, text, name) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.add_scope_rule(text, text, name) TO synchro_operator;

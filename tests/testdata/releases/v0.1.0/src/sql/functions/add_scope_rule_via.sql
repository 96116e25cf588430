-- A row of table_id belongs to scope scope_prefix || d.via_scope for every row d of the
-- registered dependency `via` whose via_match equals the row's column_name.
CREATE OR REPLACE FUNCTION synchro.add_scope_rule(
  table_id text, scope_prefix text, column_name name, via regclass, via_match name, via_scope name)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF via IS NULL THEN
    RAISE EXCEPTION 'scope rule refused: via must be a registered dependency' USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro._stage_scope_rule(table_id, scope_prefix, column_name, via, via_match, via_scope);
END
$$;

REVOKE ALL ON FUNCTION synchro.add_scope_rule(text, text, name, regclass, name, name) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.add_scope_rule(text, text, name, regclass, name, name) TO synchro_operator;

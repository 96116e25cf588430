-- Removes every scope rule of a synced table from the pending generation, so that its
-- rules can be staged anew with add_scope_rule. At activation the prefixes whose rules
-- changed get a new membership-rule generation (their cursors and rebuild sessions are
-- stale, SY409) and the runner re-evaluates their membership. Returns how many rules
-- were removed.
CREATE OR REPLACE FUNCTION synchro.remove_scope_rules(table_id text) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint := synchro._pending_generation();
  rid bigint;
  n integer;
BEGIN
  SELECT r.relation_id INTO rid
    FROM synchro.relation r JOIN synchro.registration reg ON reg.relation_id = r.relation_id AND reg.generation = g
   WHERE r.table_id = remove_scope_rules.table_id AND r.registration_kind = 'synced';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'remove_scope_rules refused: unknown table_id' USING ERRCODE = 'SY400';
  END IF;
  DELETE FROM synchro.scope_rule s WHERE s.generation = g AND s.relation_id = rid;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$$;

REVOKE ALL ON FUNCTION synchro.remove_scope_rules(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.remove_scope_rules(text) TO synchro_operator;

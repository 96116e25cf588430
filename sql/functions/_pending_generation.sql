-- Returns the pending registry generation, creating it as a copy of the active one on
-- first use. Registry changes serialize on a transaction-scoped advisory lock, so two
-- operators staging at once take turns instead of racing on the generation number.
CREATE OR REPLACE FUNCTION synchro._pending_generation() RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint;
  active bigint;
BEGIN
  PERFORM synchro._registry_lock();
  SELECT generation INTO g FROM synchro.registry_generation WHERE state = 'pending';
  IF FOUND THEN
    RETURN g;
  END IF;
  SELECT generation INTO active FROM synchro.registry_generation WHERE state = 'active';
  SELECT coalesce(max(generation), 0) + 1 INTO g FROM synchro.registry_generation;
  INSERT INTO synchro.registry_generation (generation, state) VALUES (g, 'pending');
  IF active IS NOT NULL THEN
    INSERT INTO synchro.registration (generation, relation_id, columns)
    SELECT g, relation_id, columns FROM synchro.registration WHERE generation = active;
    INSERT INTO synchro.scope_rule (generation, relation_id, rule_no, scope_prefix, column_name,
                                    via_relation_id, via_match, via_scope)
    SELECT g, relation_id, rule_no, scope_prefix, column_name, via_relation_id, via_match, via_scope
      FROM synchro.scope_rule WHERE generation = active;
  END IF;
  RETURN g;
END
$$;

REVOKE ALL ON FUNCTION synchro._pending_generation() FROM PUBLIC;

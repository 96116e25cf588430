-- Installs (or repairs) the mandatory triggers of one registered relation: the
-- side-effect-free key guard, the TRUNCATE guard and the three AFTER ROW fences, after
-- generating the relation's fence function (synchro._fence_source). The fence carries
-- the registered identity, so a renamed relation still fences under its registered
-- name and capture sees the drift.
CREATE OR REPLACE FUNCTION synchro._install_triggers(rid bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.relation;
  op text;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
  EXECUTE synchro._fence_source(rid);

  EXECUTE format(
    'CREATE OR REPLACE TRIGGER synchro_guard_key BEFORE UPDATE ON %I.%I FOR EACH ROW '
    'WHEN (OLD.%I IS DISTINCT FROM NEW.%I) EXECUTE FUNCTION synchro._refuse_key_change()',
    r.schema_name, r.table_name, r.key_column, r.key_column);
  EXECUTE format(
    'CREATE OR REPLACE TRIGGER synchro_guard_truncate BEFORE TRUNCATE ON %I.%I '
    'FOR EACH STATEMENT EXECUTE FUNCTION synchro._refuse_truncate()',
    r.schema_name, r.table_name);
  FOREACH op IN ARRAY ARRAY['insert', 'update', 'delete'] LOOP
    EXECUTE format(
      'CREATE OR REPLACE TRIGGER %I AFTER %s ON %I.%I FOR EACH ROW EXECUTE FUNCTION synchro.%I()',
      'synchro_fence_' || op, upper(op), r.schema_name, r.table_name, '_fence_' || r.relation_id);
  END LOOP;
  -- A disabled trigger would make capture block later; enable them now.
  FOREACH op IN ARRAY ARRAY['synchro_guard_key', 'synchro_guard_truncate', 'synchro_fence_insert',
                            'synchro_fence_update', 'synchro_fence_delete'] LOOP
    EXECUTE format('ALTER TABLE %I.%I ENABLE TRIGGER %I', r.schema_name, r.table_name, op);
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._install_triggers(bigint) FROM PUBLIC;

-- Installs (or repairs) the mandatory triggers of one registered relation: the
-- side-effect-free key guard, the TRUNCATE guard and the three AFTER ROW fences. The
-- fence arguments carry the registered identity, so a renamed relation still fences
-- under its registered name and capture sees the drift.
CREATE OR REPLACE FUNCTION synchro._install_triggers(rid bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.relation;
  args text;
  op text;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
  args := format('%L, %L, %L, %L, %L, %L, %L, %L, %L',
    r.relation_id, r.registration_kind, coalesce(r.table_id, ''), r.schema_name, r.table_name, r.key_column,
    -- The live-tuple probe of the out-of-order check; key_pg_type is one of five
    -- fixed type names (table constraint), so %s is safe.
    format('SELECT xmin, cmin FROM ONLY %I.%I WHERE %I = $1::%s', r.schema_name, r.table_name, r.key_column, r.key_pg_type),
    pg_current_xact_id(), pg_relation_filenode(r.relid::regclass));

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
      'CREATE OR REPLACE TRIGGER %I AFTER %s ON %I.%I FOR EACH ROW EXECUTE FUNCTION synchro._fence(%s)',
      'synchro_fence_' || op, upper(op), r.schema_name, r.table_name, args);
  END LOOP;
  -- A disabled trigger would make capture block later; enable them now.
  FOREACH op IN ARRAY ARRAY['synchro_guard_key', 'synchro_guard_truncate', 'synchro_fence_insert',
                            'synchro_fence_update', 'synchro_fence_delete'] LOOP
    EXECUTE format('ALTER TABLE %I.%I ENABLE TRIGGER %I', r.schema_name, r.table_name, op);
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._install_triggers(bigint) FROM PUBLIC;

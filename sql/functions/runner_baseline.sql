-- First start: materializes the baseline of the rows already in registered tables and
-- creates stream generation 1. Called inside the REPEATABLE READ transaction that
-- imported the new slot's exported snapshot: live tables and row versions are read as
-- of the slot's consistent point, so the baseline joins the WAL stream with no gap and
-- no overlap. The baseline is generation_start; clients receive it through rebuild.
-- Push fences visible in the snapshot are covered by it ('baseline' coverage).
CREATE OR REPLACE FUNCTION synchro.runner_baseline(slot_name text, plugin text, consistent_point pg_lsn)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
AS $$
DECLARE
  reg bigint;
  rel record;
  missing bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'repeatable read' THEN
    RAISE EXCEPTION 'baseline refused: run it in the REPEATABLE READ transaction that imported the slot snapshot'
      USING ERRCODE = 'SY400';
  END IF;
  IF EXISTS (SELECT 1 FROM synchro.progress) THEN
    RAISE EXCEPTION 'baseline refused: a stream generation exists already' USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro.runner_stage_open();
  SELECT generation INTO reg FROM synchro.registry_generation WHERE state = 'active';

  FOR rel IN
    SELECT r.*, g.columns FROM synchro.registration g JOIN synchro.relation r USING (relation_id)
     WHERE g.generation = reg ORDER BY r.relation_id
  LOOP
    -- The image in the registered shape, as materialization renders it
    -- (synchro._image_sql): no code of the application's runs with the owner's rights.
    EXECUTE format(
      'INSERT INTO synchro.projection (relation_id, pk, pk_int, version, image) '
      'SELECT $1, t.%I::text, CASE WHEN $2 <> %L THEN t.%I::text::bigint END, v.version, %s '
      '  FROM ONLY %I.%I t LEFT JOIN synchro.row_version v ON v.relation_id = $1 AND v.pk = t.%I::text',
      rel.key_column, 'string', rel.key_column, synchro._image_sql(rel.relation_id, reg, 't', true),
      rel.schema_name, rel.table_name, rel.key_column)
    USING rel.relation_id, rel.key_type;
  END LOOP;
  -- Every row passed a fence or got a version at activation; a row without one means
  -- the registry is inconsistent, and a baseline must not invent a version.
  SELECT relation_id INTO missing FROM synchro.projection WHERE version IS NULL LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'baseline refused: a registered row has no version (relation_id %)', missing USING ERRCODE = 'SY400';
  END IF;

  -- Rule index and membership of every projected row.
  INSERT INTO pg_temp.synchro_w_final (relation_id, pk) SELECT p.relation_id, p.pk FROM synchro.projection p;
  PERFORM synchro._refresh_rule_values(reg);
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
    JOIN synchro.relation r ON r.relation_id = p.relation_id AND r.registration_kind = 'synced';
  PERFORM synchro._evaluate_membership(reg);
  INSERT INTO synchro.membership (scope, relation_id, pk, table_id, pk_order)
  SELECT s.scope, s.relation_id, s.pk, r.table_id, CASE WHEN r.key_type = 'string' THEN 0 ELSE s.pk::bigint END
    FROM pg_temp.synchro_w_scopes s JOIN synchro.relation r ON r.relation_id = s.relation_id
  ON CONFLICT DO NOTHING;

  -- Push fences visible in the snapshot are represented by this baseline.
  UPDATE synchro.write_fence SET coverage = 'baseline', covered_at = now() WHERE coverage IS NULL;

  INSERT INTO synchro.stream_generation (stream_generation, slot_name, plugin, database_name, generation_start_lsn, state)
  VALUES (1, slot_name, plugin, current_database(), consistent_point, 'active');
  INSERT INTO synchro.progress (stream_generation, generation_start_lsn, processed_end_lsn, registry_generation)
  VALUES (1, consistent_point, consistent_point, reg);
  PERFORM synchro._stage_reset(NULL);
  RETURN 1;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_baseline(text, text, pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_baseline(text, text, pg_lsn) TO synchro_runner;

-- The rows of a baseline: every row of every relation registered in generation reg,
-- read from the live tables by the caller's snapshot, with its row version, rendered in
-- the registered shape, into sch.projection (synchro for the first start; synchro_reset
-- for a reset's stage, which is filled without holding the live tables' names). Rule
-- index and membership follow (synchro._baseline_project, synchro.runner_reset_index).
CREATE OR REPLACE FUNCTION synchro._baseline_rows(reg bigint, sch text) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path and the row-image
-- settings.
AS $$
DECLARE
  rel record;
  missing bigint;
BEGIN
  IF sch NOT IN ('synchro', 'synchro_reset') THEN
    RAISE EXCEPTION '_baseline_rows: not a projection schema' USING ERRCODE = 'SY400';
  END IF;
  FOR rel IN
    SELECT r.*, g.columns FROM synchro.registration g JOIN synchro.relation r USING (relation_id)
     WHERE g.generation = reg ORDER BY r.relation_id
  LOOP
    -- The image in the registered shape, as materialization renders it
    -- (synchro._image_sql): no code of the application's runs with the owner's rights,
    -- as long as the columns have their registered types (checked, the table locked).
    PERFORM synchro._live_shape_check(rel.relation_id, reg);
    EXECUTE format(
      'INSERT INTO %I.projection (relation_id, pk, pk_int, version, image, image_bytes) '
      'SELECT x.*, pg_catalog.octet_length(x.image::pg_catalog.text) FROM ('
      'SELECT $1, t.%I::text, CASE WHEN $2 <> %L THEN t.%I::text::bigint END, v.version, %s AS image '
      '  FROM ONLY %I.%I t LEFT JOIN synchro.row_version v ON v.relation_id = $1 AND v.pk = t.%I::text '
      'OFFSET 0) x',
      sch, rel.key_column, 'string', rel.key_column, synchro._image_sql(rel.relation_id, reg, 't', true),
      rel.schema_name, rel.table_name, rel.key_column)
    USING rel.relation_id, rel.key_type;
  END LOOP;
  -- Every row passed a fence or got a version at activation; a row without one means
  -- the registry is inconsistent, and a baseline must not invent a version.
  EXECUTE format('SELECT relation_id FROM %I.projection WHERE version IS NULL LIMIT 1', sch) INTO missing;
  IF missing IS NOT NULL THEN
    RAISE EXCEPTION 'baseline refused: a registered row has no version (relation_id %)', missing USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._baseline_rows(bigint, text) FROM PUBLIC;

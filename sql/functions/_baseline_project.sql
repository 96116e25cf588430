-- The baseline of the registered projections: every row of every relation registered in
-- generation reg, read from the live tables by the caller's snapshot, with its row
-- version, its rule index and its membership. Shared by the first start
-- (synchro.runner_baseline) and a stream reset (synchro.runner_reset_baseline), which
-- both run it in the REPEATABLE READ transaction that imported a new slot's exported
-- snapshot, so the baseline is exactly the source state at the slot's consistent point.
-- It writes synchro.projection, synchro.rule_value and synchro.membership, which must be
-- empty: for a reset these names denote the staged tables (synchro._reset_swap).
CREATE OR REPLACE FUNCTION synchro._baseline_project(reg bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path and the row-image
-- settings.
AS $$
DECLARE
  rel record;
  missing bigint;
BEGIN
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
END
$$;

REVOKE ALL ON FUNCTION synchro._baseline_project(bigint) FROM PUBLIC;

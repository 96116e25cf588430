-- Stages the projection bootstraps in phase staging (docs/bootstrap.md). Called inside
-- the REPEATABLE READ transaction that imported the exported snapshot of the slot the
-- runner just created (its replication connection still open), so everything is read
-- as of the slot's consistent point C: each relation's rows rendered in the registered
-- shape of the bootstrap's generation by the first start's expression, with their row
-- versions; their count and digest (checked again by the merge); and one immutable
-- coverage record per accepted push fence of the relation visible in the snapshot.
-- Then phase staged with C: the main worker merges the stage at its first transaction
-- end at or after C and skips the relation's events of transactions before C
-- (synchro._bootstrap_catch_up). A death before this commits leaves nothing staged;
-- the runner takes a new snapshot. No table's rows are locked: writers go on.
CREATE OR REPLACE FUNCTION synchro.runner_bootstrap_stage(consistent_point pg_lsn, slot_name text)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Reads registered tables planned as the owner: no CHECK constraint of theirs folded
-- (synchro._planned_app_code).
SET constraint_exclusion TO 'partition'
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
AS $$
DECLARE
  b     record;
  rel   synchro.relation;
  snap  pg_snapshot := pg_current_snapshot();
  n     bigint;
  total bigint;
  dig   text;
  staged bigint := 0;
BEGIN
  IF current_setting('transaction_isolation') <> 'repeatable read' THEN
    RAISE EXCEPTION 'bootstrap stage refused: run it in the REPEATABLE READ transaction that imported the slot snapshot'
      USING ERRCODE = 'SY400';
  END IF;
  IF consistent_point IS NULL OR slot_name IS NULL OR slot_name !~ '^[a-z0-9_]{1,63}$' THEN
    RAISE EXCEPTION 'bootstrap stage refused: no consistent point or no valid slot name' USING ERRCODE = 'SY400';
  END IF;
  -- One stage at a time, and never concurrently with a stream reset's activation,
  -- which subsumes unmerged bootstraps under the same lock (synchro.activate_reset).
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.bootstrap', synchro._lock_seed()));
  -- The session's work tables, including the row-image cache that _image_sql's SQL is
  -- kept in: made by the owner, refused if the session made its own.
  PERFORM synchro.runner_stage_open();

  FOR b IN SELECT x.* FROM synchro.bootstrap x
            WHERE x.kind = 'project' AND x.phase = 'staging' AND x.merged_at IS NULL
            ORDER BY x.generation, x.relation_id FOR UPDATE LOOP
    SELECT r.* INTO STRICT rel FROM synchro.relation r WHERE r.relation_id = b.relation_id;
    DELETE FROM synchro.bootstrap_row s WHERE s.generation = b.generation AND s.relation_id = b.relation_id;
    -- The SQL below is written for the registered types: refused if one changed.
    PERFORM synchro._live_shape_check(rel.relation_id, b.generation);
    -- Each row's version by an index probe (LATERAL, OFFSET 0): a join planned from
    -- row_version's statistics can scan it once per row.
    EXECUTE format(
      'WITH ins AS ('
      '  INSERT INTO synchro.bootstrap_row (generation, relation_id, pk, pk_int, version, image) '
      '  SELECT $3, $1, t.%I::text, CASE WHEN $2 <> %L THEN t.%I::text::bigint END, v.version, %s '
      '    FROM ONLY %I.%I t CROSS JOIN LATERAL ('
      '      SELECT v0.version FROM synchro.row_version v0 WHERE v0.relation_id = $1 AND v0.pk = t.%I::text OFFSET 0) v '
      '  RETURNING pk, version) '
      'SELECT count(*), count(*)::text || '':'' || coalesce(sum(hashtextextended(ins.pk || ''/'' || ins.version, 0)::numeric), 0)::text FROM ins',
      rel.key_column, 'string', rel.key_column, synchro._image_sql(rel.relation_id, b.generation, 't', true),
      rel.schema_name, rel.table_name, rel.key_column)
      INTO n, dig USING rel.relation_id, rel.key_type, b.generation;
    -- Every row got a version (runner_bootstrap_versions, or a fence): a staged row
    -- never invents one, and a row without one must not be left out silently.
    EXECUTE format('SELECT count(*) FROM ONLY %I.%I', rel.schema_name, rel.table_name) INTO total;
    IF total <> n THEN
      RAISE EXCEPTION 'bootstrap stage refused: a row of relation_id % has no version', rel.relation_id
        USING ERRCODE = 'SY400';
    END IF;
    DELETE FROM synchro.bootstrap_coverage c WHERE c.generation = b.generation AND c.relation_id = b.relation_id;
    INSERT INTO synchro.bootstrap_coverage (generation, relation_id, fence_id, attempt, snapshot_boundary)
    SELECT b.generation, b.relation_id, f.fence_id, b.attempt, snap
      FROM synchro.write_fence f WHERE f.relation_id = b.relation_id;
    UPDATE synchro.bootstrap x
       SET phase = 'staged', row_count = n, row_digest = dig, consistent_point = runner_bootstrap_stage.consistent_point,
           snapshot_boundary = snap, slot_name = runner_bootstrap_stage.slot_name, staged_at = now()
     WHERE x.generation = b.generation AND x.relation_id = b.relation_id;
    staged := staged + 1;
  END LOOP;
  RETURN staged;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_bootstrap_stage(pg_lsn, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_bootstrap_stage(pg_lsn, text) TO synchro_runner;

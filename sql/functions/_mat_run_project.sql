-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- project. Projections and rule values as the last link of each row leaves them.
CREATE OR REPLACE FUNCTION synchro._mat_run_project(reg bigint, deletes boolean, anyknown boolean)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- Projections: the last link of each row decides. A statement with nothing to do
  -- is not run (deletes: a last link deletes its row; anyknown: a row of the run was
  -- there before it): a small batch's fixed cost is its ~40 statements' executor start-up,
  -- 30-80 us each however few rows they touch (pg_stat_statements, one transaction
  -- per batch), and these two were 130 us of an insert batch's ~2 ms.
  IF deletes THEN
    DELETE FROM synchro.projection pr
     WHERE pr.ctid = ANY (ARRAY(
       SELECT x.ctid FROM pg_temp.synchro_b_links l
        CROSS JOIN LATERAL (SELECT p2.ctid FROM synchro.projection p2
                             WHERE p2.relation_id = l.relation_id AND p2.pk = l.pk OFFSET 0) x
        WHERE l.last AND l.op = 'delete'));
  END IF;
  -- Fresh rows (synchro._mat_links_fn) are new: a plain INSERT. ON CONFLICT inserted
  -- each speculatively, one more WAL record per row (the confirmation) that the
  -- runner's own walsender decodes too, and probed the index first. A projection row
  -- there anyway is a unique violation: the runner re-runs the batch through the
  -- reference path, which upserts (and that is also what catches a membership or rule
  -- value the probes below skip for fresh rows: they exist only with a projection).
  INSERT INTO synchro.projection (relation_id, pk, pk_int, version, image, image_bytes)
  SELECT l.relation_id, l.pk, l.pk_int, l.version, l.image, l.image_bytes FROM pg_temp.synchro_b_links l
   WHERE l.fresh;
  IF anyknown THEN
    INSERT INTO synchro.projection AS pr (relation_id, pk, pk_int, version, image, image_bytes)
    SELECT l.relation_id, l.pk, l.pk_int, l.version, l.image, l.image_bytes FROM pg_temp.synchro_b_links l
     WHERE l.last AND l.op <> 'delete' AND NOT l.fresh
    ON CONFLICT (relation_id, pk) DO UPDATE
      SET version = excluded.version, image = excluded.image, image_bytes = excluded.image_bytes;
  END IF;

  -- Rule values (the columns synchro._rule_value_columns names) as the last link
  -- leaves them; a value that did not change is neither deleted nor written again. A
  -- run whose tables have direct rules only has nothing to index.
  IF EXISTS (SELECT 1 FROM synchro._rule_value_columns(reg) c
              WHERE c.relation_id IN (SELECT DISTINCT l.relation_id FROM pg_temp.synchro_b_links l)) THEN
    DELETE FROM synchro.rule_value v
     WHERE v.ctid = ANY (ARRAY(
       SELECT x.ctid FROM pg_temp.synchro_b_links l
        CROSS JOIN LATERAL (SELECT v2.ctid, v2.column_name, v2.value FROM synchro.rule_value v2
                             WHERE v2.relation_id = l.relation_id AND v2.pk = l.pk OFFSET 0) x
        WHERE l.last AND NOT l.fresh
          AND (l.op = 'delete' OR l.image ->> x.column_name::text IS DISTINCT FROM x.value)));
    INSERT INTO synchro.rule_value (relation_id, column_name, value, pk)
    SELECT DISTINCT l.relation_id, c.column_name, l.image ->> c.column_name::text, l.pk
      FROM pg_temp.synchro_b_links l
      JOIN synchro._rule_value_columns(reg) c ON c.relation_id = l.relation_id
     WHERE l.last AND l.op <> 'delete' AND l.image ->> c.column_name::text IS NOT NULL
    ON CONFLICT DO NOTHING;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_project(bigint, boolean, boolean) FROM PUBLIC;

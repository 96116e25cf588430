-- The projection bootstrap's merge at an activation (docs/bootstrap.md): called by
-- synchro._materialize_txn for each registry generation the source transaction
-- activates, right after the activation is validated and before the transaction's row
-- events are applied. Only stages taken at the activation itself (consistent_point
-- NULL): a relation staged 'remove' loses its projection, rule index and membership;
-- a 'project' stage left by migration 00016's in-transaction copy gets its rows. A
-- 'project' bootstrap staged under an exported snapshot is merged at its consistent
-- point instead (synchro._bootstrap_catch_up). Rule index and membership are rebuilt
-- by synchro._reevaluate_prefixes: activate_registry gave every prefix whose rules
-- name them this generation. No pull effects: those prefixes' clients rebuild
-- (SY409). Atomic with the materialization, so a replay finds it merged (the
-- transaction is a duplicate) or not at all.
CREATE OR REPLACE FUNCTION synchro._bootstrap_merge(reg bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_txn, under the pinned
-- search_path of synchro.materialize_batch.
AS $$
DECLARE
  b      record;
  n      bigint;
  merged bigint := 0;
BEGIN
  FOR b IN SELECT x.relation_id, x.kind, x.row_count FROM synchro.bootstrap x
            WHERE x.generation = reg AND x.merged_at IS NULL AND x.phase = 'staged' AND x.consistent_point IS NULL
            ORDER BY x.relation_id FOR UPDATE LOOP
    DELETE FROM synchro.membership m WHERE m.relation_id = b.relation_id;
    DELETE FROM synchro.rule_value v WHERE v.relation_id = b.relation_id;
    DELETE FROM synchro.projection p WHERE p.relation_id = b.relation_id;
    IF b.kind = 'project' THEN
      INSERT INTO synchro.projection (relation_id, pk, pk_int, version, image, image_bytes)
      SELECT s.relation_id, s.pk, s.pk_int, s.version, s.image, pg_catalog.octet_length(s.image::pg_catalog.text)
        FROM synchro.bootstrap_row s
       WHERE s.generation = reg AND s.relation_id = b.relation_id;
      GET DIAGNOSTICS n = ROW_COUNT;
      -- The staged count was taken when the rows were staged: a difference means the
      -- stage is incomplete, and a partial projection must not become the state.
      IF n <> b.row_count THEN
        RAISE EXCEPTION 'poison: bootstrap_incomplete' USING ERRCODE = 'SYP08', DETAIL = format('relation_id=%s', b.relation_id);
      END IF;
      merged := merged + n;
      DELETE FROM synchro.bootstrap_row s WHERE s.generation = reg AND s.relation_id = b.relation_id;
    ELSE
      -- Nothing fences the relation any more (its triggers went at activation), and no
      -- push may name it: its row versions are dead weight.
      DELETE FROM synchro.row_version v WHERE v.relation_id = b.relation_id;
      -- An earlier generation's bootstrap of the relation that was not merged yet has
      -- nothing left to merge into.
      DELETE FROM synchro.bootstrap_row s
       WHERE s.relation_id = b.relation_id AND s.generation < reg
         AND s.generation IN (SELECT y.generation FROM synchro.bootstrap y
                               WHERE y.relation_id = b.relation_id AND y.merged_at IS NULL);
      UPDATE synchro.bootstrap y SET phase = 'subsumed', detail = 'relation removed'
       WHERE y.relation_id = b.relation_id AND y.generation < reg AND y.merged_at IS NULL
         AND y.phase NOT IN ('merged', 'subsumed');
      -- Accepted pushes of the relation still uncovered: every transaction before this
      -- activation is processed, so these are the ones an earlier bootstrap's snapshot
      -- took (their events were skipped for its merge, which never comes now). Nothing
      -- makes them pull-visible any more (the relation is gone): covered, or their
      -- clients waited (SY503) for ever (TestBootstrapRemovalCoversSkippedPushes).
      UPDATE synchro.write_fence wf SET coverage = 'baseline', covered_at = now()
       WHERE wf.relation_id = b.relation_id AND wf.coverage IS NULL;
    END IF;
    UPDATE synchro.bootstrap x SET merged_at = now(), phase = 'merged'
     WHERE x.generation = reg AND x.relation_id = b.relation_id;
  END LOOP;
  -- Fresh statistics and this session's plans made again before the membership of the
  -- merged rows is evaluated (synchro._reevaluate_prefixes): plans made while the
  -- projection was nearly empty would scan all of it once per merged row (see
  -- synchro._bootstrap_catch_up). Below a thousand rows in all that costs less than this.
  IF merged > 1000 THEN
    ANALYZE (SKIP_LOCKED) synchro.projection;
    DISCARD PLANS;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._bootstrap_merge(bigint) FROM PUBLIC;

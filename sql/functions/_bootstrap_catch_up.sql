-- The main worker as the projection bootstrap's catch-up (docs/bootstrap.md; ADR 001,
-- "Causally Bound Projection Baseline And Stream Reset", last paragraph). The runner
-- staged each requested bootstrap under the exported snapshot of a slot whose
-- consistent point is C: a source transaction whose commit LSN is below C is in the
-- snapshot, every later one is in the WAL after C, which the main stream reads anyway
-- with the ordinary materialization code. So, for stream generation gen with registry
-- generation reg in effect, at source position pos:
--   * a bootstrap activated in the stream (generation <= reg) that is not staged yet:
--     SYW01 bootstrap_pending when wait (the runner stages it, then replays the
--     transaction from the slot; nothing was written). The stream never guesses.
--   * a staged one with C <= pos: merged now, before the transaction's events: the
--     projection becomes the staged rows, the accepted push fences the snapshot
--     covered become covered (bootstrap_coverage), and the rule index and membership
--     of every prefix whose rules name the relation are rebuilt (no pull effects:
--     activate_registry made those prefixes' cursors stale).
--   * a staged one with C > pos: transaction t's row events and fences of that
--     relation are dropped from the stage (they are in the snapshot).
-- Called by synchro._materialize_txn (t, pos = its commit LSN, wait) and by
-- synchro.runner_idle (t NULL, pos = the idle boundary: no transaction before it is
-- left, so C at or below it is a transaction-end boundary of the main stream).
CREATE OR REPLACE FUNCTION synchro._bootstrap_catch_up(gen bigint, reg bigint, t int, pos pg_lsn, wait boolean)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path and the row-image
-- settings (materialize_batch, runner_idle).
AS $$
DECLARE
  b        record;
  n        bigint;
  digest   text;
  rels     bigint[] := '{}';
  changed  text[];
  skip     bigint[];
BEGIN
  -- A relation owed a later bootstrap (its latest one at or below reg was subsumed):
  -- this transaction's events and fences of it are dropped, its later stage holds them
  -- (synchro._bootstrap_owed). Before anything else: the stream need not wait for that
  -- stage here (its activation comes later in the stream).
  IF t IS NOT NULL THEN
    skip := synchro._bootstrap_owed(gen, reg);
    IF cardinality(skip) > 0 THEN
      DELETE FROM pg_temp.synchro_stage s
       WHERE s.txn = _bootstrap_catch_up.t
         AND ((s.kind IN ('I', 'U', 'D') AND s.relid IN (SELECT r.relid FROM synchro.relation r WHERE r.relation_id = ANY (skip)))
           OR (s.kind = 'M' AND s.prefix = 'synchro.fence' AND s.f_relation_id = ANY (skip)));
    END IF;
    skip := NULL;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM synchro.bootstrap x
                  WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.stream_generation = gen
                    AND x.generation <= reg AND x.phase NOT IN ('merged', 'subsumed')) THEN
    RETURN;
  END IF;
  IF wait AND EXISTS (SELECT 1 FROM synchro.bootstrap x
                       WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.stream_generation = gen
                         AND x.generation <= reg AND x.phase IN ('requested', 'staging', 'failed')) THEN
    RAISE EXCEPTION 'bootstrap_pending: a projection bootstrap of this registry generation is not staged yet'
      USING ERRCODE = 'SYW01';
  END IF;

  FOR b IN SELECT x.* FROM synchro.bootstrap x
            WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.stream_generation = gen
              AND x.generation <= reg AND x.phase = 'staged' AND x.consistent_point <= pos
            ORDER BY x.generation, x.relation_id FOR UPDATE LOOP
    -- Consumer groups (at-least-once): a relation that streamed before this activation
    -- had its changes committed between the activation and C folded into the stage, so
    -- no source transaction's change record carries them. The difference between the
    -- projection (frozen since the activation: those events were dropped) and the stage
    -- becomes the change records of one transaction at C - 1: after every transaction
    -- materialized (all committed below C), before every later one (none commits below
    -- C), and no group's checkpoint is past it. Rows changed or inserted in the window
    -- in the new shape; rows deleted there with their deletion's version (the row's
    -- reservation, when it still holds it; a key inserted again since has a later
    -- version, which its own change brings). A row the window left alone gets none (its
    -- new shape is the merge's, read like a new table's). A relation new to the stream
    -- gets none either (docs/bootstrap.md): a group reads it once after the merge
    -- (b.streamed: registered before the activation, its projection established).
    -- Bootstraps staged under one snapshot share C: each numbers its changes after the
    -- ones already written there.
    IF b.streamed AND EXISTS (SELECT 1 FROM synchro.relation r
                               WHERE r.relation_id = b.relation_id AND r.registration_kind = 'synced') THEN
      INSERT INTO synchro.change (stream_generation, commit_lsn, event_ordinal, commit_time, relation_id, table_id, pk,
                                  op, version, image)
      SELECT gen, b.consistent_point - 1,
             (coalesce((SELECT max(c.event_ordinal) + 1 FROM synchro.change c
                         WHERE c.stream_generation = gen AND c.commit_lsn = b.consistent_point - 1), 0)
              + row_number() OVER (ORDER BY d.pk_int, d.pk COLLATE "C") - 1)::int,
             b.staged_at, b.relation_id, r.table_id, d.pk, d.op, d.version, d.image
        FROM (SELECT s.pk, s.pk_int, 'upsert' AS op, s.version, s.image
                FROM synchro.bootstrap_row s
               WHERE s.generation = b.generation AND s.relation_id = b.relation_id
                 AND NOT EXISTS (SELECT 1 FROM synchro.projection p
                                  WHERE p.relation_id = b.relation_id AND p.pk = s.pk AND p.version = s.version)
              UNION ALL
              SELECT p.pk, p.pk_int, 'delete',
                     coalesce((SELECT v.version FROM synchro.row_version v
                                WHERE v.relation_id = p.relation_id AND v.pk = p.pk AND v.deleted), p.version),
                     NULL::jsonb
                FROM synchro.projection p
               WHERE p.relation_id = b.relation_id
                 AND NOT EXISTS (SELECT 1 FROM synchro.bootstrap_row s
                                  WHERE s.generation = b.generation AND s.relation_id = b.relation_id AND s.pk = p.pk)) d
        JOIN synchro.relation r ON r.relation_id = b.relation_id;
    END IF;
    DELETE FROM synchro.membership m WHERE m.relation_id = b.relation_id;
    DELETE FROM synchro.rule_value v WHERE v.relation_id = b.relation_id;
    DELETE FROM synchro.projection p WHERE p.relation_id = b.relation_id;
    WITH ins AS (
      INSERT INTO synchro.projection (relation_id, pk, pk_int, version, image, image_bytes)
      SELECT s.relation_id, s.pk, s.pk_int, s.version, s.image, pg_catalog.octet_length(s.image::pg_catalog.text)
        FROM synchro.bootstrap_row s
       WHERE s.generation = b.generation AND s.relation_id = b.relation_id
      RETURNING pk, version)
    SELECT count(*), count(*)::text || ':' || coalesce(sum(hashtextextended(ins.pk || '/' || ins.version, 0)::numeric), 0)::text
      INTO n, digest FROM ins;
    -- Count and digest were taken when the rows were staged: a difference means the
    -- stage is incomplete or altered, and a partial projection must not become the state.
    IF n <> b.row_count OR digest IS DISTINCT FROM b.row_digest THEN
      RAISE EXCEPTION 'poison: bootstrap_incomplete' USING ERRCODE = 'SYP08', DETAIL = format('relation_id=%s', b.relation_id);
    END IF;
    DELETE FROM synchro.bootstrap_row s WHERE s.generation = b.generation AND s.relation_id = b.relation_id;
    -- Accepted pushes of the relation in the snapshot: their events were skipped (or
    -- come before C), the merged rows represent them.
    UPDATE synchro.write_fence wf SET coverage = 'baseline', covered_at = now()
     WHERE wf.fence_id IN (SELECT c.fence_id FROM synchro.bootstrap_coverage c
                            WHERE c.generation = b.generation AND c.relation_id = b.relation_id AND c.attempt = b.attempt)
       AND wf.coverage IS NULL;
    UPDATE synchro.bootstrap x SET merged_at = now(), phase = 'merged'
     WHERE x.generation = b.generation AND x.relation_id = b.relation_id;
    rels := rels || b.relation_id;
  END LOOP;

  IF cardinality(rels) > 0 THEN
    -- Fresh statistics first, and this session's cached plans made again, before any
    -- statement probes the merged rows: a plan cached while the projection was nearly
    -- empty probes it with a sequential scan, and would scan the whole merged projection
    -- once per merged row (a CI run spent minutes in synchro._evaluate_membership that
    -- way, holding back every slot creation of the cluster;
    -- TestBootstrapMergeProbesProjection). SKIP_LOCKED: a manual VACUUM or ANALYZE, or
    -- an anti-wraparound autovacuum, of the table would otherwise hold the merge (and its
    -- xid) until it ends; without fresh statistics the new plans still see the table's
    -- size in pages. Stale statistics also made every later transaction's membership
    -- statement look millions of rows big, each paying for a JIT compilation of half a
    -- second.
    ANALYZE (SKIP_LOCKED) synchro.projection;
    DISCARD PLANS;
    -- Rule index of the merged relations, then the membership of every prefix whose
    -- rules name one of them, directly or as a via dependency, for every projected row.
    INSERT INTO synchro.rule_value (relation_id, column_name, value, pk)
    SELECT DISTINCT p.relation_id, c.column_name, p.image ->> c.column_name::text, p.pk
      FROM synchro._rule_value_columns(reg) c
      JOIN synchro.projection p ON p.relation_id = c.relation_id
     WHERE c.relation_id = ANY (rels) AND p.image ->> c.column_name::text IS NOT NULL
    ON CONFLICT DO NOTHING;
    SELECT array_agg(DISTINCT s.scope_prefix) INTO changed FROM synchro.scope_rule s
     WHERE s.generation = reg AND (s.relation_id = ANY (rels) OR s.via_relation_id = ANY (rels));
    ANALYZE (SKIP_LOCKED) synchro.rule_value; -- probed by via rules' membership, just below
    PERFORM synchro._rebuild_prefix_membership(reg, changed);
    ANALYZE (SKIP_LOCKED) synchro.membership;
  END IF;

  IF t IS NULL THEN
    RETURN;
  END IF;
  -- Still staged with C beyond this transaction: its events of those relations are in
  -- the snapshot, and the merge will bring them.
  SELECT array_agg(DISTINCT x.relation_id) INTO skip FROM synchro.bootstrap x
   WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.stream_generation = gen
     AND x.generation <= reg AND x.phase = 'staged' AND x.consistent_point > pos;
  IF skip IS NOT NULL THEN
    DELETE FROM pg_temp.synchro_stage s
     WHERE s.txn = _bootstrap_catch_up.t
       AND ((s.kind IN ('I', 'U', 'D') AND s.relid IN (SELECT r.relid FROM synchro.relation r WHERE r.relation_id = ANY (skip)))
         OR (s.kind = 'M' AND s.prefix = 'synchro.fence' AND s.f_relation_id = ANY (skip)));
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._bootstrap_catch_up(bigint, bigint, int, pg_lsn, boolean) FROM PUBLIC;

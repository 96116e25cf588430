-- A phase of the set-based run (synchro._materialize_run), for a run that changes
-- dependency rows: each point's pull effects (pg_temp.synchro_b_points, scopes from
-- synchro._mat_run_dep_scopes) at its own transaction's commit position, as the
-- reference path (synchro._mat_effects) writes them: an upsert in every scope the row
-- is in after the point when it was touched, else in every scope it entered; a delete
-- in every scope it left. The scopes before a point are its previous point's, or the
-- memberships before the run for the first. A dependency event reaches several rows,
-- so effect_ordinal counts within (transaction, scope, event) in canonical (table_id,
-- typed key, operation) order, as the reference path does. synchro._mat_run_effects
-- is the same phase for a run without dependency changes (every ordinal 0, no sort).
CREATE OR REPLACE FUNCTION synchro._mat_run_dep_effects(gen bigint)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._mat_run_write, under the pinned search_path,
-- row-image settings and join methods of the run. plpgsql: the body names pg_temp
-- work tables that do not exist at install time.
AS $$
BEGIN
  WITH before AS MATERIALIZED (
    SELECT p.t, p.relation_id, p.pk, s.scope, s.scope_hash
      FROM pg_temp.synchro_b_points p
      JOIN pg_temp.synchro_b_points pp ON pp.relation_id = p.relation_id AND pp.pk = p.pk AND pp.point = p.point - 1
      JOIN pg_temp.synchro_b_scopes s ON s.relation_id = pp.relation_id AND s.pk = pp.pk AND s.t = pp.t
     WHERE p.point > 1
    UNION ALL
    SELECT p.t, p.relation_id, p.pk, o.scope, o.scope_hash
      FROM pg_temp.synchro_b_points p
      JOIN pg_temp.synchro_b_old o ON o.relation_id = p.relation_id AND o.pk = p.pk
     WHERE p.point = 1),
  e AS (
    SELECT n.scope, n.scope_hash, n.t, n.relation_id, n.pk, 'upsert' AS op
      FROM pg_temp.synchro_b_scopes n
      JOIN pg_temp.synchro_b_points p ON p.relation_id = n.relation_id AND p.pk = n.pk AND p.t = n.t
     WHERE p.touched
        OR NOT EXISTS (SELECT 1 FROM before o
                        WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.t = n.t AND o.scope = n.scope)
    UNION ALL
    SELECT o.scope, o.scope_hash, o.t, o.relation_id, o.pk, 'delete' FROM before o
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                        WHERE n.relation_id = o.relation_id AND n.pk = o.pk AND n.t = o.t AND n.scope = o.scope))
  INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
                              table_id, relation_id, pk, op, version, image, image_bytes)
  SELECT gen, e.scope, e.scope_hash, b.commit_lsn, p.event_ordinal,
         (pg_catalog.row_number() OVER (PARTITION BY e.t, e.scope, p.event_ordinal
                                        ORDER BY p.table_id COLLATE "C", p.pk_int, e.pk COLLATE "C", e.op))::int - 1,
         p.table_id, e.relation_id, e.pk, e.op,
         CASE WHEN e.op = 'upsert' THEN p.version END,
         CASE WHEN e.op = 'upsert' THEN p.image END,
         CASE WHEN e.op = 'upsert' THEN p.image_bytes END
    FROM e
    JOIN pg_temp.synchro_b_points p ON p.relation_id = e.relation_id AND p.pk = e.pk AND p.t = e.t
    JOIN pg_temp.synchro_b_txn b ON b.t = e.t;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_dep_effects(bigint) FROM PUBLIC;

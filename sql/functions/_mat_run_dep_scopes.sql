-- A phase of the set-based run (synchro._materialize_run), for a run that changes
-- dependency rows: evaluate membership at every point of pg_temp.synchro_b_points
-- (synchro._mat_run_points). The scopes each row was in before the run
-- (pg_temp.synchro_b_old, from synchro.membership) and those each point puts it in
-- (pg_temp.synchro_b_scopes): direct rules from the point's image; via rules from the
-- dependency rows as they stand at the point's transaction t: a dependency row the run
-- changed at or before t as its last link there leaves it, any other as stored (the
-- projections and rule values are written after this phase, so the stored ones are
-- the state before the run). Returns how many memberships the run's rows held before
-- it. synchro._mat_run_scopes is the same phase for a run without dependency changes,
-- where every point is a link and the stored dependency state holds throughout.
CREATE OR REPLACE FUNCTION synchro._mat_run_dep_scopes(reg bigint, big boolean)
RETURNS int
LANGUAGE plpgsql
-- No SET clause: called only from synchro._mat_run_write, under the pinned search_path,
-- row-image settings and join methods of the run. plpgsql: the body names pg_temp
-- work tables that do not exist at install time.
AS $$
DECLARE
  n_old int;
BEGIN
  -- Each row's memberships before the run, read once at its first point. Only this
  -- transaction writes membership (progress is locked), so the ctids stay valid.
  INSERT INTO pg_temp.synchro_b_old (relation_id, pk, scope, scope_hash, mctid)
  SELECT p.relation_id, p.pk, m.scope, m.scope_hash, m.ctid
    FROM pg_temp.synchro_b_points p
    CROSS JOIN LATERAL (SELECT m.scope, m.scope_hash, m.ctid FROM synchro.membership m
                         WHERE m.relation_id = p.relation_id AND m.pk = p.pk OFFSET 0) m
   WHERE p.point = 1 AND NOT p.fresh;
  GET DIAGNOSTICS n_old = ROW_COUNT;

  WITH dl AS MATERIALIZED (
    -- The run's dependency links, each held from its transaction until the row's next.
    SELECT l.t, pg_catalog.lead(l.t) OVER w AS next_t, pg_catalog.min(l.t) OVER w AS first_t,
           l.relation_id, l.pk, l.op, l.image
      FROM pg_temp.synchro_b_links l
     WHERE l.table_id IS NULL
    WINDOW w AS (PARTITION BY l.relation_id, l.pk ORDER BY l.t ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)),
  vals AS MATERIALIZED (
    SELECT p.t, p.relation_id, p.pk, r.scope_prefix, r.via_relation_id, r.via_match, r.via_scope,
           p.image ->> r.column_name::text AS value
      FROM pg_temp.synchro_b_points p
      JOIN synchro.scope_rule r ON r.generation = reg AND r.relation_id = p.relation_id
     WHERE p.op <> 'delete' AND p.image ->> r.column_name::text IS NOT NULL),
  dv AS MATERIALIZED (
    -- Each live dependency link's via_match and via_scope values, per via rule shape.
    SELECT d.t, d.next_t, d.relation_id, r.via_match, r.via_scope,
           d.image ->> r.via_match::text AS match_value, d.image ->> r.via_scope::text AS scope_value
      FROM dl d
      JOIN (SELECT DISTINCT r.via_relation_id, r.via_match, r.via_scope FROM synchro.scope_rule r
             WHERE r.generation = reg AND r.via_relation_id IS NOT NULL) r ON r.via_relation_id = d.relation_id
     WHERE d.op <> 'delete'),
  sc AS (
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || x.value AS scope
      FROM vals x
     WHERE x.via_relation_id IS NULL
    UNION
    -- Dependency rows the run changed at or before t, as their last link there leaves them.
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || d.scope_value
      FROM vals x
      JOIN dv d ON d.relation_id = x.via_relation_id AND d.via_match = x.via_match AND d.via_scope = x.via_scope
               AND d.match_value = x.value
     WHERE d.t <= x.t AND (d.next_t IS NULL OR d.next_t > x.t) AND d.scope_value IS NOT NULL
    UNION
    -- The others, as stored.
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || s.scope_value
      FROM vals x
      CROSS JOIN LATERAL synchro._via_scope_rows(x.via_relation_id, x.via_match, x.via_scope, x.value) s
     WHERE x.via_relation_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM dl d WHERE d.relation_id = x.via_relation_id AND d.pk = s.pk AND d.first_t <= x.t))
  INSERT INTO pg_temp.synchro_b_scopes (t, relation_id, pk, scope, scope_hash)
  SELECT sc.t, sc.relation_id, sc.pk, sc.scope, synchro._scope_hash(sc.scope) FROM sc;
  IF big THEN
    ANALYZE pg_temp.synchro_b_scopes (t, relation_id);
  END IF;
  RETURN n_old;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_dep_scopes(bigint, boolean) FROM PUBLIC;

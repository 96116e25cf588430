-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- evaluate membership. The scopes each row was in before the run (pg_temp.synchro_b_old,
-- from synchro.membership) and the scopes each link puts it in
-- (pg_temp.synchro_b_scopes, from its image and the dependency projections). Returns
-- how many memberships the run's rows held before it.
CREATE OR REPLACE FUNCTION synchro._mat_run_scopes(reg bigint, big boolean)
RETURNS int
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
DECLARE
  n_old int;
BEGIN
  -- The memberships the run's rows held before it, read once (each row's first link):
  -- the delete effects of first links, and the membership changes at the end, come
  -- from here instead of probing synchro.membership three times per row. Only this
  -- transaction writes membership (progress is locked), so the ctids stay valid. A
  -- fresh row (synchro._mat_links_fn) had none: not probed.
  INSERT INTO pg_temp.synchro_b_old (relation_id, pk, scope, scope_hash, mctid)
  SELECT l.relation_id, l.pk, m.scope, m.scope_hash, m.ctid
    FROM pg_temp.synchro_b_links l
    CROSS JOIN LATERAL (SELECT m.scope, m.scope_hash, m.ctid FROM synchro.membership m
                         WHERE m.relation_id = l.relation_id AND m.pk = l.pk OFFSET 0) m
   WHERE l.link = 1 AND NOT l.fresh;
  GET DIAGNOSTICS n_old = ROW_COUNT;

  -- Each link's scopes under the generation's rules, from its own image (direct
  -- rules) and the unchanged dependency projections (via rules), each with its hash,
  -- computed here once for the effects and the memberships that store it (hashing
  -- each distinct scope once and joining it back cost more than hashing every row).
  WITH vals AS MATERIALIZED (
    SELECT l.t, l.relation_id, l.pk, r.scope_prefix, r.via_relation_id, r.via_match, r.via_scope,
           l.image ->> r.column_name::text AS value
      FROM pg_temp.synchro_b_links l
      JOIN synchro.scope_rule r ON r.generation = reg AND r.relation_id = l.relation_id
     WHERE l.op <> 'delete' AND l.image ->> r.column_name::text IS NOT NULL),
  sc AS (
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || x.value AS scope
      FROM vals x
     WHERE x.via_relation_id IS NULL
    UNION
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || s.value
      FROM vals x
      CROSS JOIN LATERAL synchro._via_scope_values(x.via_relation_id, x.via_match, x.via_scope, x.value) AS s(value)
     WHERE x.via_relation_id IS NOT NULL)
  INSERT INTO pg_temp.synchro_b_scopes (t, relation_id, pk, scope, scope_hash)
  SELECT sc.t, sc.relation_id, sc.pk, sc.scope, synchro._scope_hash(sc.scope) FROM sc;
  IF big THEN
    ANALYZE pg_temp.synchro_b_scopes (t, relation_id);
  END IF;
  RETURN n_old;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_scopes(bigint, boolean) FROM PUBLIC;

-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- write effects. Each link's pull effects at its own transaction's commit position.
CREATE OR REPLACE FUNCTION synchro._mat_run_effects(gen bigint, multi boolean)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- Net pull effects per link: upsert in every scope the row is in after the link (it
  -- was touched), delete in every scope it was in before and is not after.
  -- effect_ordinal counts within (scope, event) in canonical (table_id, typed key,
  -- operation) order, as the per-transaction path does; in a run without dependency
  -- changes (the only one this phase writes: synchro._mat_run_dep_effects writes the
  -- others) it is always 0, with no sort to find it: an event's effects are
  -- those of its own row (its link: each link is one row's last event in one
  -- transaction, and event ordinals are unique within a transaction), and a row gets
  -- at most one effect per scope there (an upsert when it is in the scope after the
  -- link, else a delete when it was in it before: b_scopes and the memberships are
  -- unique per row and scope). The batch-invariant tests compare this with the
  -- per-transaction path's ordinals.
  WITH before AS (
    SELECT l.t, l.relation_id, l.pk, s.scope, s.scope_hash
      FROM pg_temp.synchro_b_links l
      JOIN pg_temp.synchro_b_links pl ON pl.relation_id = l.relation_id AND pl.pk = l.pk AND pl.link = l.link - 1
      JOIN pg_temp.synchro_b_scopes s ON s.relation_id = pl.relation_id AND s.pk = pl.pk AND s.t = pl.t
     WHERE multi AND l.link > 1
    UNION ALL
    SELECT l.t, l.relation_id, l.pk, o.scope, o.scope_hash
      FROM pg_temp.synchro_b_links l
      JOIN pg_temp.synchro_b_old o ON o.relation_id = l.relation_id AND o.pk = l.pk
     WHERE l.link = 1),
  e AS (
    SELECT n.scope, n.scope_hash, n.t, n.relation_id, n.pk, 'upsert' AS op FROM pg_temp.synchro_b_scopes n
    UNION ALL
    SELECT o.scope, o.scope_hash, o.t, o.relation_id, o.pk, 'delete' FROM before o
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                        WHERE n.relation_id = o.relation_id AND n.pk = o.pk AND n.t = o.t AND n.scope = o.scope))
  INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
                              table_id, relation_id, pk, op, version, image, image_bytes)
  SELECT gen, e.scope, e.scope_hash, b.commit_lsn, l.event_ordinal, 0,
         l.table_id, e.relation_id, e.pk, e.op,
         CASE WHEN e.op = 'upsert' THEN l.version END,
         CASE WHEN e.op = 'upsert' THEN l.image END,
         CASE WHEN e.op = 'upsert' THEN l.image_bytes END
    FROM e
    JOIN pg_temp.synchro_b_links l ON l.relation_id = e.relation_id AND l.pk = e.pk AND l.t = e.t
    JOIN pg_temp.synchro_b_txn b ON b.t = e.t;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_effects(bigint, boolean) FROM PUBLIC;

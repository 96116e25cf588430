-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- write membership as the last link of each row leaves it.
CREATE OR REPLACE FUNCTION synchro._mat_run_membership(n_old int)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- Membership as the last link leaves it: memberships that ended, then new ones.
  IF n_old > 0 THEN
    DELETE FROM synchro.membership m
     WHERE m.ctid = ANY (ARRAY(
       SELECT o.mctid FROM pg_temp.synchro_b_old o
         JOIN pg_temp.synchro_b_links l ON l.relation_id = o.relation_id AND l.pk = o.pk AND l.last
        WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                           WHERE n.relation_id = l.relation_id AND n.pk = l.pk AND n.t = l.t AND n.scope = o.scope)));
  END IF;
  INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
  SELECT n.scope, n.scope_hash, n.relation_id, n.pk, l.table_id, coalesce(l.pk_int, 0)
    FROM pg_temp.synchro_b_links l
    JOIN pg_temp.synchro_b_scopes n ON n.relation_id = l.relation_id AND n.pk = l.pk AND n.t = l.t
   WHERE l.last
     AND NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_old o
                      WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.scope = n.scope);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_membership(int) FROM PUBLIC;

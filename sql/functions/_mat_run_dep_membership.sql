-- A phase of the set-based run (synchro._materialize_run), for a run that changes
-- dependency rows: write membership as the last point of each row
-- (pg_temp.synchro_b_points) leaves it. synchro._mat_run_membership is the same phase
-- over the links of a run without dependency changes.
CREATE OR REPLACE FUNCTION synchro._mat_run_dep_membership(n_old int)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._mat_run_write, under the pinned search_path,
-- row-image settings and join methods of the run. plpgsql: the body names pg_temp
-- work tables that do not exist at install time.
AS $$
BEGIN
  IF n_old > 0 THEN
    DELETE FROM synchro.membership m
     WHERE m.ctid = ANY (ARRAY(
       SELECT o.mctid FROM pg_temp.synchro_b_old o
         JOIN pg_temp.synchro_b_points p ON p.relation_id = o.relation_id AND p.pk = o.pk AND p.last
        WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                           WHERE n.relation_id = p.relation_id AND n.pk = p.pk AND n.t = p.t AND n.scope = o.scope)));
  END IF;
  INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
  SELECT n.scope, n.scope_hash, n.relation_id, n.pk, p.table_id, coalesce(p.pk_int, 0)
    FROM pg_temp.synchro_b_points p
    JOIN pg_temp.synchro_b_scopes n ON n.relation_id = p.relation_id AND n.pk = p.pk AND n.t = p.t
   WHERE p.last
     AND NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_old o
                      WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.scope = n.scope);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_dep_membership(int) FROM PUBLIC;

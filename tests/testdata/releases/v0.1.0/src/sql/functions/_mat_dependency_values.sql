-- A phase of synchro._materialize_txn: the rule values of the dependency rows the
-- transaction changed (pg_temp.synchro_w_final), into pg_temp.synchro_w_depvals.
-- Called before and after the projections change, so the synced rows reached through
-- either the old or the new values are impacted.
CREATE OR REPLACE FUNCTION synchro._mat_dependency_values() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_txn, under the pinned
-- search_path of synchro.materialize_batch. PL/pgSQL, not SQL: a SQL body is checked
-- at install, when the session's temporary work tables do not exist.
AS $$
BEGIN
  INSERT INTO pg_temp.synchro_w_depvals (relation_id, column_name, value, event_ordinal)
  SELECT v.relation_id, v.column_name, v.value, f.event_ordinal
    FROM pg_temp.synchro_w_final f
    CROSS JOIN LATERAL (SELECT v.relation_id, v.column_name, v.value FROM synchro.rule_value v
                         WHERE v.relation_id = f.relation_id AND v.pk = f.pk OFFSET 0) v
   WHERE f.registration_kind = 'capture_dependency';
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_dependency_values() FROM PUBLIC;

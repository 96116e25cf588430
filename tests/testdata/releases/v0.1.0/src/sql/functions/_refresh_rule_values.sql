-- Re-indexes the scope-rule columns (synced column_name, dependency via_match) of the
-- projection rows listed in pg_temp.synchro_w_final (relation_id, pk): what membership
-- evaluation looks up to find the rows a dependency change impacts.
CREATE OR REPLACE FUNCTION synchro._refresh_rule_values(reg_gen bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
BEGIN
  -- Probe rule_value_by_row per changed row (the work table has no statistics; a
  -- join could scan the whole index table).
  DELETE FROM synchro.rule_value v
   WHERE v.ctid = ANY (ARRAY(
     SELECT x.ctid FROM pg_temp.synchro_w_final f
      CROSS JOIN LATERAL (SELECT v2.ctid FROM synchro.rule_value v2
                           WHERE v2.relation_id = f.relation_id AND v2.pk = f.pk OFFSET 0) x));
  INSERT INTO synchro.rule_value (relation_id, column_name, value, pk)
  SELECT DISTINCT f.relation_id, c.col, p.image ->> c.col::text, f.pk
    FROM pg_temp.synchro_w_final f
    CROSS JOIN LATERAL (SELECT p.image FROM synchro.projection p
                         WHERE p.relation_id = f.relation_id AND p.pk = f.pk OFFSET 0) p
    JOIN (SELECT r.relation_id, r.column_name AS col FROM synchro.scope_rule r WHERE r.generation = reg_gen
          UNION
          SELECT r.via_relation_id, r.via_match FROM synchro.scope_rule r
           WHERE r.generation = reg_gen AND r.via_relation_id IS NOT NULL) c ON c.relation_id = f.relation_id
   WHERE p.image ->> c.col::text IS NOT NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro._refresh_rule_values(bigint) FROM PUBLIC;

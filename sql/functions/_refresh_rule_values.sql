-- Re-indexes the columns synchro._rule_value_columns names (via-rule columns of synced
-- relations, via_match of dependencies) of the
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
    JOIN (SELECT c.relation_id, c.column_name AS col FROM synchro._rule_value_columns(reg_gen) c) c
      ON c.relation_id = f.relation_id
   WHERE p.image ->> c.col::text IS NOT NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro._refresh_rule_values(bigint) FROM PUBLIC;

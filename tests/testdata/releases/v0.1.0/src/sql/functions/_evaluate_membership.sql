-- Membership of the rows in pg_temp.synchro_w_impacted under the scope rules of one
-- registry generation, from the commit-ordered projections only (never live tables):
-- fills pg_temp.synchro_w_scopes with (relation_id, pk, scope). A row's scopes are the
-- union of its table's rules; a NULL value gives no scope.
CREATE OR REPLACE FUNCTION synchro._evaluate_membership(reg_gen bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
BEGIN
  DELETE FROM pg_temp.synchro_w_scopes;
  -- The rule values of the impacted rows first, so that the lookup of dependency rows
  -- is one equality join on the rule-value index (not a filter after a cross join).
  WITH vals AS MATERIALIZED (
    SELECT i.relation_id, i.pk, r.scope_prefix, r.via_relation_id, r.via_match, r.via_scope,
           p.image ->> r.column_name::text AS value
      FROM pg_temp.synchro_w_impacted i
      CROSS JOIN LATERAL (SELECT p.image FROM synchro.projection p
                           WHERE p.relation_id = i.relation_id AND p.pk = i.pk OFFSET 0) p
      JOIN synchro.scope_rule r ON r.generation = reg_gen AND r.relation_id = i.relation_id
     WHERE p.image ->> r.column_name::text IS NOT NULL)
  INSERT INTO pg_temp.synchro_w_scopes (relation_id, pk, scope)
  SELECT x.relation_id, x.pk, x.scope_prefix || x.value
    FROM vals x
   WHERE x.via_relation_id IS NULL
  UNION
  SELECT x.relation_id, x.pk, x.scope_prefix || s.value
    FROM vals x
    CROSS JOIN LATERAL synchro._via_scope_values(x.via_relation_id, x.via_match, x.via_scope, x.value) AS s(value)
   WHERE x.via_relation_id IS NOT NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro._evaluate_membership(bigint) FROM PUBLIC;

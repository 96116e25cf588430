-- The columns synchro.rule_value indexes under one registry generation: what the
-- fan-out of a dependency change looks up, and nothing else (issue 7, per-row cost).
--
--   * the column of every via rule of a synced relation: a changed dependency row
--     reaches the synced rows whose rule column holds its via_match value;
--   * the via_match column of every dependency relation: a via rule finds the
--     dependency rows a synced row's value matches (synchro._via_scope_values).
--
-- A direct rule's column is not indexed: a row's direct scopes come from its own
-- image, and no lookup ever goes from a value to the rows holding it. Indexing it
-- cost a heap row and two index entries per changed row for nothing.
CREATE OR REPLACE FUNCTION synchro._rule_value_columns(reg_gen bigint)
RETURNS TABLE (relation_id bigint, column_name name)
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already. One SQL statement, so the planner inlines it.
AS $$
  SELECT r.relation_id, r.column_name FROM synchro.scope_rule r
   WHERE r.generation = _rule_value_columns.reg_gen AND r.via_relation_id IS NOT NULL
  UNION
  SELECT r.via_relation_id, r.via_match FROM synchro.scope_rule r
   WHERE r.generation = _rule_value_columns.reg_gen AND r.via_relation_id IS NOT NULL
$$;

REVOKE ALL ON FUNCTION synchro._rule_value_columns(bigint) FROM PUBLIC;

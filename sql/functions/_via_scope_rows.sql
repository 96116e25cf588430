-- The dependency rows a via rule reaches from a row whose rule column holds value, as
-- the projections hold them: each projected row of via_relation_id whose via_match
-- equals value, with its key and its via_scope (NULLs give no scope). The one lookup
-- of the stored dependency state: synchro._via_scope_values takes its scope values
-- (both membership evaluations), and a set-based run with dependency changes
-- (synchro._mat_run_dep_scopes) needs the keys too, to leave out the rows the run
-- changed before the transaction evaluated. rule_value probed by its primary key
-- (value_hash, then the full value), then the dependency's projection by key. One
-- SQL statement, so the planner inlines it; OFFSET 0 keeps each probe an index probe.
CREATE OR REPLACE FUNCTION synchro._via_scope_rows(via_relation_id bigint, via_match name, via_scope name, value text)
RETURNS TABLE (pk text, scope_value text)
LANGUAGE sql STABLE
AS $$
  -- Parameters are qualified: a bare "value" would name rule_value's column.
  SELECT v.pk, d.image ->> _via_scope_rows.via_scope::text
    FROM (SELECT v.relation_id, v.pk FROM synchro.rule_value v
           WHERE v.relation_id = _via_scope_rows.via_relation_id AND v.column_name = _via_scope_rows.via_match
             AND v.value_hash = synchro._scope_hash(_via_scope_rows.value)
             AND v.value = _via_scope_rows.value OFFSET 0) v
    CROSS JOIN LATERAL (SELECT d.image FROM synchro.projection d
                         WHERE d.relation_id = v.relation_id AND d.pk = v.pk OFFSET 0) d
   WHERE d.image ->> _via_scope_rows.via_scope::text IS NOT NULL
$$;

REVOKE ALL ON FUNCTION synchro._via_scope_rows(bigint, name, name, text) FROM PUBLIC;

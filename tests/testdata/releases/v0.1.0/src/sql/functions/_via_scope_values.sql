-- The scope values a via rule gives a row whose rule column holds value: via_scope of
-- every projected dependency row of via_relation_id whose via_match equals value (NULLs
-- give no scope). The one lookup both membership evaluations use (the per-transaction
-- _evaluate_membership and the set-based _materialize_run): rule_value probed by its
-- primary key (value_hash, then the full value), then the dependency's projection by
-- key. One SQL statement, so the planner inlines it; OFFSET 0 keeps each probe an
-- index probe.
CREATE OR REPLACE FUNCTION synchro._via_scope_values(via_relation_id bigint, via_match name, via_scope name, value text)
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
  -- Parameters are qualified: a bare "value" would name rule_value's column.
  SELECT d.image ->> _via_scope_values.via_scope::text
    FROM (SELECT v.relation_id, v.pk FROM synchro.rule_value v
           WHERE v.relation_id = _via_scope_values.via_relation_id AND v.column_name = _via_scope_values.via_match
             AND v.value_hash = synchro._scope_hash(_via_scope_values.value)
             AND v.value = _via_scope_values.value OFFSET 0) v
    CROSS JOIN LATERAL (SELECT d.image FROM synchro.projection d
                         WHERE d.relation_id = v.relation_id AND d.pk = v.pk OFFSET 0) d
   WHERE d.image ->> _via_scope_values.via_scope::text IS NOT NULL
$$;

REVOKE ALL ON FUNCTION synchro._via_scope_values(bigint, name, name, text) FROM PUBLIC;

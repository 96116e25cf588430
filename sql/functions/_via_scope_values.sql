-- The scope values a via rule gives a row whose rule column holds value: via_scope of
-- every projected dependency row of via_relation_id whose via_match equals value (NULLs
-- give no scope), from synchro._via_scope_rows, the one lookup of the stored
-- dependency state. Used by the per-transaction _evaluate_membership and the
-- set-based run without dependency changes (synchro._mat_run_scopes). One SQL
-- statement over another, so the planner inlines both.
CREATE OR REPLACE FUNCTION synchro._via_scope_values(via_relation_id bigint, via_match name, via_scope name, value text)
RETURNS SETOF text
LANGUAGE sql STABLE
AS $$
  SELECT s.scope_value
    FROM synchro._via_scope_rows(_via_scope_values.via_relation_id, _via_scope_values.via_match,
                                 _via_scope_values.via_scope, _via_scope_values.value) s
$$;

REVOKE ALL ON FUNCTION synchro._via_scope_values(bigint, name, name, text) FROM PUBLIC;

-- The membership-rule generation a scope is bound to: that of the registered prefix
-- the scope starts with (prefixes never start one another), 0 when none matches.
CREATE OR REPLACE FUNCTION synchro._scope_rule_generation(scope text) RETURNS bigint
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
  SELECT coalesce((SELECT sp.rule_generation FROM synchro.scope_prefix sp
                    WHERE starts_with(scope, sp.scope_prefix)
                    ORDER BY length(sp.scope_prefix) DESC LIMIT 1), 0)
$$;

REVOKE ALL ON FUNCTION synchro._scope_rule_generation(text) FROM PUBLIC;

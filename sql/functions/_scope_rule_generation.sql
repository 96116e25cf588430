-- The membership-rule generation a scope is bound to: that of the registered prefix
-- the scope starts with (prefixes never start one another), 0 when none matches.
CREATE OR REPLACE FUNCTION synchro._scope_rule_generation(scope text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce((SELECT sp.rule_generation FROM synchro.scope_prefix sp
                    WHERE starts_with(scope, sp.scope_prefix)
                    ORDER BY length(sp.scope_prefix) DESC LIMIT 1), 0)
$$;

REVOKE ALL ON FUNCTION synchro._scope_rule_generation(text) FROM PUBLIC;

-- True when the helper that calls this was called directly by synchro.push, as an
-- assignment (`x := synchro._push_...(...)`). The private push helpers are executable by
-- synchro_app only because push, SECURITY INVOKER so that it writes with the caller's
-- own privileges and row-level security, must call them as the caller (CONTRACT.md,
-- Roles). Each refuses any other caller: a direct call, a call from the caller's own
-- function or trigger, or from dynamic SQL.
--
-- The call stack (PG_CONTEXT) is built by the server: line 1 is this function, line 2
-- the helper (both fixed text), line 3 the helper's caller. Only the real synchro.push
-- prints as "PL/pgSQL function synchro.push(text,jsonb)" (format_procedure quotes any
-- other schema or name that would look alike, and pg_temp functions print as
-- pg_temp_N). A call through SQL (SELECT, PERFORM, EXECUTE) puts an 'SQL statement
-- "..."' line at line 3 instead, whose text a caller could choose: never accepted.
CREATE OR REPLACE FUNCTION synchro._called_from_push() RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  stack text;
BEGIN
  GET DIAGNOSTICS stack = PG_CONTEXT;
  RETURN split_part(stack, E'\n', 3) ~ '^PL/pgSQL function synchro\.push\(text,jsonb\) line [0-9]+ at assignment$';
END
$$;

REVOKE ALL ON FUNCTION synchro._called_from_push() FROM PUBLIC;

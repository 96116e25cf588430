-- True when the helper that calls this (a synchro._push_* function) was called directly
-- by synchro._push_run, push's body. The private push helpers are executable by
-- synchro_app only because push, SECURITY INVOKER so that it writes with the caller's
-- own privileges and row-level security, must call them as the caller (CONTRACT.md,
-- Roles). Each refuses any other caller: a direct call, a call from the caller's own
-- function or trigger, or from dynamic SQL.
--
-- The call stack (PG_CONTEXT) is built by the server: line 1 is this function, line 2
-- the helper, line 3 the helper's caller. _push_run calls every helper in a plain
-- PL/pgSQL expression (an assignment), so line 3 is its own frame, which differs from
-- the helper's frame (line 2) only in the function's signature and what follows it: the
-- words before the signature are the same in every server language (lc_messages), and
-- only the real function prints as "synchro._push_run(text,jsonb,text)"
-- (format_procedure quotes any schema or name that would look alike, and pg_temp
-- functions print as pg_temp_N). A call through SQL (SELECT, PERFORM, EXECUTE, a
-- trigger) puts another kind of line there (SQL statement "...", SQL function "...",
-- PL/pgSQL function <its own name>): never accepted, whatever text the caller chose for
-- its statement. Nothing of the caller is ever evaluated in _push_run's own frame (its
-- search_path is pinned; only its EXECUTEd statements get the caller's path back), so
-- no operator, cast, domain check or inlined SQL function of the caller can call a
-- helper from there.
CREATE OR REPLACE FUNCTION synchro._called_from_push() RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  stack  text;
  helper text;
  caller text;
  pos    int;
BEGIN
  GET DIAGNOSTICS stack = PG_CONTEXT;
  helper := split_part(stack, E'\n', 2);
  caller := split_part(stack, E'\n', 3);
  pos := strpos(helper, 'synchro._push_');
  RETURN pos > 0
     AND left(caller, pos - 1) = left(helper, pos - 1)
     AND substr(caller, pos, 34) = 'synchro._push_run(text,jsonb,text)';
END
$$;

REVOKE ALL ON FUNCTION synchro._called_from_push() FROM PUBLIC;

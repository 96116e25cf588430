-- synchro.push (CONTRACT.md "Push"): the contract's entry point, a one-statement SQL
-- wrapper around synchro._push_run, which does the work. It hands _push_run the caller's
-- search_path: _push_run runs its own code with search_path pinned (so no operator, type
-- or function of the caller is ever evaluated in its frame, where it could call a push
-- helper as if it were push) and gives the caller's path back to the statements on the
-- caller's table only, so the application's triggers, defaults and policies run as they
-- do for any other write (docs/security.md).
--
-- SECURITY INVOKER, like _push_run: the writes run with the caller's own privileges and
-- row-level security. The body is parsed at install (BEGIN ATOMIC), never in the caller's
-- search_path.
CREATE OR REPLACE FUNCTION synchro.push(client_id text, mutations jsonb) RETURNS jsonb
LANGUAGE sql
BEGIN ATOMIC
  SELECT synchro._push_run(client_id, mutations, pg_catalog.current_setting('search_path'));
END;

REVOKE ALL ON FUNCTION synchro.push(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.push(text, jsonb) TO synchro_app;

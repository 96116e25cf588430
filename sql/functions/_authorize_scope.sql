-- Consults the operator's scope authorizer, when one is set: false (or NULL) is SY403.
-- The authorizer's rules (synchro._check_authorizer) are checked again before every
-- call: its owner may have altered it since it was set (made it SECURITY INVOKER,
-- unpinned its search_path, given it away). A function that no longer meets them is
-- not called, and the scope is refused (fail closed).
CREATE OR REPLACE FUNCTION synchro._authorize_scope(client_id text, scope text) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
DECLARE
  fn text;
  allowed boolean;
  sp text;
BEGIN
  SELECT value INTO fn FROM synchro.setting WHERE name = 'scope_authorizer';
  IF fn IS NULL THEN
    RETURN;
  END IF;
  IF synchro._check_authorizer(fn::regprocedure) IS NOT NULL THEN
    RAISE EXCEPTION 'scope_denied: the scope authorizer no longer meets the authorizer rules (docs/security.md)'
      USING ERRCODE = 'SY403';
  END IF;
  -- fn is the text of a regprocedure stored by set_scope_authorizer: a qualified,
  -- quoted function name; its argument list is dropped and the OID's name is used.
  sp := current_setting('search_path');
  EXECUTE format('SELECT %s($1, $2)', fn::regprocedure::oid::regproc) INTO allowed USING client_id, scope;
  -- A session-level SET inside the authorizer (a plain SET, or set_config(..., false))
  -- outlives its SET clause and overrides the caller's too: pull and rebuild went on as
  -- the pack owner with the authorizer owner's search_path, and an unqualified function
  -- or operator in their later statements ran that owner's code with the pack owner's
  -- rights (TestScopeAuthorizerCannotChangeSearchPath). Fail closed. Every name here
  -- is qualified: the check itself runs under whatever path the authorizer left.
  IF NOT pg_catalog.texteq(pg_catalog.current_setting('search_path'), sp) THEN
    PERFORM pg_catalog.set_config('search_path', sp, true);
    RAISE EXCEPTION 'scope_denied: the scope authorizer changed search_path (docs/security.md)' USING ERRCODE = 'SY403';
  END IF;
  IF allowed IS NOT TRUE THEN
    RAISE EXCEPTION 'scope_denied: the scope authorizer refused this scope' USING ERRCODE = 'SY403';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._authorize_scope(text, text) FROM PUBLIC;

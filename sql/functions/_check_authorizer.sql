-- The rules a scope authorizer must meet (docs/security.md, "Writing a scope
-- authorizer"), checked when it is set and again before every call, since its owner may
-- alter or replace it afterwards. Returns the first rule that fails, NULL when all hold.
--
-- pull and rebuild are SECURITY DEFINER: a SECURITY INVOKER authorizer would run with
-- the pack owner's rights, called by the application role with arguments it chooses. So
-- the authorizer must be SECURITY DEFINER itself (it runs as its own owner), with a
-- pinned search_path that lists pg_temp last (the caller's temporary objects cannot
-- take over its names), and owned by a role that is neither a superuser nor holds the
-- pack owner's privileges, nor can read the pack's tables.
CREATE OR REPLACE FUNCTION synchro._check_authorizer(fn oid) RETURNS text
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
  SELECT CASE
    WHEN p.oid IS NULL THEN 'the function does not exist'
    WHEN p.prokind <> 'f' OR p.prorettype <> 'pg_catalog.bool'::pg_catalog.regtype OR p.pronargs <> 2
      OR p.proargtypes[0] <> 'pg_catalog.text'::pg_catalog.regtype OR p.proargtypes[1] <> 'pg_catalog.text'::pg_catalog.regtype
      THEN 'the function must be (client_id text, scope text) returns boolean'
    WHEN NOT p.prosecdef THEN 'the function must be SECURITY DEFINER (it would run with the pack owner''s rights)'
    WHEN NOT EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proconfig) c
                      WHERE c ~ '^search_path=' AND c ~ E'(=|,)\\s*"?pg_temp"?\\s*$')
      THEN 'the function must pin search_path with pg_temp last (SET search_path = ..., pg_temp)'
    WHEN r.rolsuper THEN 'the function must not be owned by a superuser'
    WHEN pg_catalog.pg_has_role(p.proowner, n.nspowner, 'USAGE')
      THEN 'the function must not be owned by a role with the pack owner''s privileges'
    -- A role that can read the pack's secrets (a grant, pg_read_all_data, ...) would
    -- hand them to any flaw of the function's body.
    WHEN pg_catalog.has_table_privilege(p.proowner, 'synchro.server_key', 'SELECT')
      THEN 'the function must not be owned by a role that can read synchro''s tables'
    -- Nor write them (a grant, pg_write_all_data): one call of a flawed body removed
    -- the setting that names the authorizer, and every scope was open
    -- (TestRegistryAuthorizerOwnerThatCanWriteThePack, found by review 2026-12-05).
    WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                  WHERE c.relnamespace = n.oid
                    AND ((c.relkind IN ('r', 'p', 'v')
                          AND pg_catalog.has_table_privilege(p.proowner, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE'))
                      OR (c.relkind = 'S' AND pg_catalog.has_sequence_privilege(p.proowner, c.oid, 'UPDATE'))))
      THEN 'the function must not be owned by a role that can write synchro''s tables'
    -- Roles that reach the server's files or programs, or can grant themselves any
    -- role (the pack's included), hold the pack owner's rights in effect.
    WHEN r.rolcreaterole
      OR pg_catalog.pg_has_role(p.proowner, 'pg_execute_server_program', 'MEMBER')
      OR pg_catalog.pg_has_role(p.proowner, 'pg_write_server_files', 'MEMBER')
      OR pg_catalog.pg_has_role(p.proowner, 'pg_read_server_files', 'MEMBER')
      THEN 'the function must not be owned by a role with CREATEROLE or the server''s file and program roles'
    -- Nor by a member of the runner's role, whose functions write the stream. (The
    -- operator's role stays allowed: deployments own authorizers by it, and its
    -- functions check their own arguments.)
    WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_roles pr
                  WHERE pr.rolname = 'synchro_runner' AND pg_catalog.pg_has_role(p.proowner, pr.oid, 'MEMBER'))
      THEN 'the function must not be owned by a member of synchro_runner'
    END
    FROM (SELECT fn) f
    LEFT JOIN pg_catalog.pg_proc p ON p.oid = f.fn
    LEFT JOIN pg_catalog.pg_roles r ON r.oid = p.proowner
    LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'synchro'
$$;

REVOKE ALL ON FUNCTION synchro._check_authorizer(oid) FROM PUBLIC;

-- Operator: sets (or, with NULL, clears) the function pull and rebuild consult before
-- serving a scope: fn(client_id text, scope text) returns boolean; false is SY403.
CREATE OR REPLACE FUNCTION synchro.set_scope_authorizer(fn regprocedure) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF fn IS NULL THEN
    DELETE FROM synchro.setting WHERE name = 'scope_authorizer';
    RETURN;
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_proc p
                  WHERE p.oid = fn AND p.prorettype = 'boolean'::regtype AND p.prokind = 'f'
                    AND p.pronargs = 2 AND p.proargtypes[0] = 'text'::regtype AND p.proargtypes[1] = 'text'::regtype) THEN
    RAISE EXCEPTION 'set_scope_authorizer refused: the function must be (client_id text, scope text) returns boolean'
      USING ERRCODE = 'SY400';
  END IF;
  INSERT INTO synchro.setting (name, value) VALUES ('scope_authorizer', fn::text)
  ON CONFLICT (name) DO UPDATE SET value = excluded.value;
END
$$;

REVOKE ALL ON FUNCTION synchro.set_scope_authorizer(regprocedure) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.set_scope_authorizer(regprocedure) TO synchro_operator;

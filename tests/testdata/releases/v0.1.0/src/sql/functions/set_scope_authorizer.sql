-- Operator: sets (or, with NULL, clears) the function pull and rebuild consult before
-- serving a scope: fn(client_id text, scope text) returns boolean; false is SY403.
-- The function must meet the rules of synchro._check_authorizer (docs/security.md): it
-- never runs with the pack owner's rights.
CREATE OR REPLACE FUNCTION synchro.set_scope_authorizer(fn regprocedure) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  broken text;
BEGIN
  IF fn IS NULL THEN
    DELETE FROM synchro.setting WHERE name = 'scope_authorizer';
    RETURN;
  END IF;
  broken := synchro._check_authorizer(fn);
  IF broken IS NOT NULL THEN
    RAISE EXCEPTION 'set_scope_authorizer refused: %', broken USING ERRCODE = 'SY400';
  END IF;
  INSERT INTO synchro.setting (name, value) VALUES ('scope_authorizer', fn::text)
  ON CONFLICT (name) DO UPDATE SET value = excluded.value;
END
$$;

REVOKE ALL ON FUNCTION synchro.set_scope_authorizer(regprocedure) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.set_scope_authorizer(regprocedure) TO synchro_operator;

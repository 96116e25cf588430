-- The first statement of a generated fence (synchro._fence_source): every column the
-- fence reads (the key, and the registered columns of the active and pending
-- generations) still has the type it had when the fence was generated.
--
-- Why: the fence's expressions on those columns (NEW.key::text, octet_length,
-- to_jsonb, an output function) were written for their types then, but PL/pgSQL plans
-- each statement against the column's type now, and PostgreSQL finds a cast by type,
-- not through search_path. The table's owner (the application) can change a
-- registered column's type to one of its own with a cast to text or json, or drop the
-- key guard and change the key's type; the fence, SECURITY DEFINER, then ran that
-- cast with the pack owner's rights (TestFenceRunsNoCallerCastAfterTypeChange, found
-- by review in the twelfth session). pg_typeof takes "any": nothing is coerced to
-- reach it, and the later statements are planned only when they run, after this one.
--
-- A retyped registered column is relation drift, which blocks capture (ADR 001); the
-- fence refuses the write (0A000) instead, until the relation is registered again and
-- the registry activated, which regenerates the fence.
CREATE OR REPLACE FUNCTION synchro._fence_type_checks(rid bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.relation;
  key_type oid;
  cols text;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
  -- The key's type as registered, not as the catalog says now: the template's key
  -- expressions (NEW.key::text, t.key = k::<key_pg_type>) are written for it, and every
  -- install regenerates the fence, after the owner may have retyped or replaced the key
  -- column; the fence then refuses every write. (A lookup by name also failed the whole
  -- install once the key column was renamed.) The registered columns' expressions are
  -- generated from their types now (synchro._fence_value_checks), so those are expected.
  key_type := ('pg_catalog.' || quote_ident(r.key_pg_type))::regtype;
  SELECT string_agg(format(E'\n     OR (CASE WHEN TG_OP OPERATOR(pg_catalog.=) ''DELETE'' THEN false ELSE '
                           'pg_catalog.pg_typeof(NEW.%s)::pg_catalog.oid OPERATOR(pg_catalog.<>) %s::pg_catalog.oid END)',
                           synchro._pl_ident(c.attname), c.atttypid), '' ORDER BY c.attname)
    INTO cols
    FROM (SELECT DISTINCT a.attname, a.atttypid
            FROM synchro.registration g
            JOIN synchro.registry_generation rg ON rg.generation = g.generation AND rg.state IN ('active', 'pending')
            JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = ANY (g.columns) AND a.attnum > 0 AND NOT a.attisdropped
           WHERE g.relation_id = rid AND a.attname <> r.key_column) c;
  RETURN format($chk$
  IF (CASE WHEN TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN pg_catalog.pg_typeof(OLD.%1$s)
           ELSE pg_catalog.pg_typeof(NEW.%1$s) END)::pg_catalog.oid OPERATOR(pg_catalog.<>) %2$s::pg_catalog.oid%3$s THEN
    RAISE EXCEPTION 'a registered column of relation_id %% changed type since its fence was generated (relation drift): register it again and activate the registry'
      , %4$s USING ERRCODE = 'feature_not_supported';
  END IF;
$chk$, synchro._pl_ident(r.key_column), key_type, coalesce(cols, ''), rid);
END
$$;

REVOKE ALL ON FUNCTION synchro._fence_type_checks(bigint) FROM PUBLIC;

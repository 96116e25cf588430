-- Validates that a relation can be registered (or stay registered) and returns its key
-- shape. Every refusal is SY400 naming the rule, never a value. Used by registration
-- and again by every activation, so drift between staging and activation is caught.
CREATE OR REPLACE FUNCTION synchro._check_relation(
  relation regclass,
  OUT schema_name name,
  OUT table_name name,
  OUT key_column name,
  OUT key_pg_type text,
  OUT key_type text)
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
DECLARE
  c record;
  pk record;
BEGIN
  SELECT cl.relkind, cl.relispartition, cl.relpersistence, cl.relreplident,
         n.nspname, cl.relname
    INTO c
    FROM pg_class cl JOIN pg_namespace n ON n.oid = cl.relnamespace
   WHERE cl.oid = relation;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'registration refused: relation does not exist' USING ERRCODE = 'SY400';
  END IF;
  IF c.nspname = 'synchro' THEN
    RAISE EXCEPTION 'registration refused: relations of schema synchro cannot be registered' USING ERRCODE = 'SY400';
  END IF;
  IF c.relkind = 'p' THEN
    RAISE EXCEPTION 'registration refused: partitioned tables are not supported' USING ERRCODE = 'SY400';
  END IF;
  IF c.relispartition THEN
    RAISE EXCEPTION 'registration refused: partitions are not supported' USING ERRCODE = 'SY400';
  END IF;
  IF c.relkind <> 'r' THEN
    RAISE EXCEPTION 'registration refused: only ordinary tables can be registered' USING ERRCODE = 'SY400';
  END IF;
  IF c.relpersistence <> 'p' THEN
    -- Unlogged and temporary tables never reach the WAL, so capture could not see them.
    RAISE EXCEPTION 'registration refused: unlogged and temporary tables are not supported' USING ERRCODE = 'SY400';
  END IF;

  SELECT con.conkey, con.condeferrable INTO pk
    FROM pg_constraint con
   WHERE con.conrelid = relation AND con.contype = 'p';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'registration refused: a primary key is required' USING ERRCODE = 'SY400';
  END IF;
  IF cardinality(pk.conkey) <> 1 THEN
    RAISE EXCEPTION 'registration refused: composite primary keys are not supported' USING ERRCODE = 'SY400';
  END IF;
  IF pk.condeferrable THEN
    RAISE EXCEPTION 'registration refused: deferrable primary keys are not supported' USING ERRCODE = 'SY400';
  END IF;

  -- The built-in types themselves, by namespace: a type or domain of another schema
  -- that is merely named text (or int4, ...) is not one of them.
  SELECT a.attname, CASE WHEN t.typnamespace = 'pg_catalog'::regnamespace THEN t.typname ELSE 'other' END
    INTO key_column, key_pg_type
    FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
   WHERE a.attrelid = relation AND a.attnum = pk.conkey[1];
  key_type := CASE key_pg_type
    WHEN 'text' THEN 'string' WHEN 'varchar' THEN 'string' WHEN 'uuid' THEN 'string'
    WHEN 'int4' THEN 'int' WHEN 'int8' THEN 'int64' END;
  IF key_type IS NULL THEN
    RAISE EXCEPTION 'registration refused: primary key type % is not supported (text, varchar, uuid, int4 or int8)',
      key_pg_type USING ERRCODE = 'SY400';
  END IF;

  -- Only REPLICA IDENTITY DEFAULT, backed by the validated primary key, gives every
  -- update and delete in the WAL the fixed row identity capture needs.
  IF c.relreplident <> 'd' THEN
    RAISE EXCEPTION 'registration refused: replica identity must be DEFAULT (found %)',
      CASE c.relreplident WHEN 'f' THEN 'FULL' WHEN 'n' THEN 'NOTHING' WHEN 'i' THEN 'USING INDEX' ELSE 'unknown' END
      USING ERRCODE = 'SY400';
  END IF;

  schema_name := c.nspname;
  table_name := c.relname;
END
$$;

REVOKE ALL ON FUNCTION synchro._check_relation(regclass) FROM PUBLIC;

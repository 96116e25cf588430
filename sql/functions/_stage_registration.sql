-- Stages a registration of either kind in the pending generation and returns its
-- immutable relation_id. Shared by register_table and register_dependency so both
-- apply exactly the same key, identity and column rules.
CREATE OR REPLACE FUNCTION synchro._stage_registration(
  relation regclass, kind text, table_id text, columns name[])
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint;
  chk record;
  cols name[];
  rid bigint;
BEGIN
  IF relation IS NULL THEN
    RAISE EXCEPTION 'registration refused: relation is required' USING ERRCODE = 'SY400';
  END IF;
  -- Registration publishes the relation's rows to pull (and its shape to the
  -- registry): the calling role must be allowed to read it. Checked first, so a
  -- refusal tells nothing about the relation's registration or shape.
  IF NOT coalesce(has_table_privilege(synchro._invoker(), relation, 'SELECT'), true) THEN
    RAISE EXCEPTION 'registration refused: the calling role may not SELECT the relation' USING ERRCODE = 'SY400';
  END IF;
  g := synchro._pending_generation();
  IF kind = 'synced' THEN
    IF table_id IS NULL OR table_id !~ '^[a-z][a-z0-9_]{0,62}$' THEN
      RAISE EXCEPTION 'registration refused: table_id must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
    END IF;
    IF EXISTS (SELECT 1 FROM synchro.relation r WHERE r.table_id = _stage_registration.table_id) THEN
      RAISE EXCEPTION 'registration refused: table_id is taken (table ids are never reused)' USING ERRCODE = 'SY400';
    END IF;
  END IF;
  IF EXISTS (SELECT 1 FROM synchro.relation r WHERE r.relid = relation) THEN
    RAISE EXCEPTION 'registration refused: relation is already registered' USING ERRCODE = 'SY400';
  END IF;
  -- A rebind staged to this table registers it at activation (23505 there, otherwise).
  IF EXISTS (SELECT 1 FROM synchro.relation_rebind b WHERE b.generation = g AND b.relid = relation) THEN
    RAISE EXCEPTION 'registration refused: relation is the new table of a staged rebind' USING ERRCODE = 'SY400';
  END IF;
  chk := synchro._check_relation(relation);
  -- A key is a row's identity in the stream and on clients, compared byte for byte; a
  -- nondeterministic collation makes other texts the same row ('a' and 'A'), and push
  -- then found a row whose identity reservation it could not name (a conflict with a
  -- row and no version: TestPushNondeterministicKeyRefused). Only at registration: an
  -- existing registration keeps working (the fence compares keys byte for byte).
  IF EXISTS (SELECT 1 FROM pg_attribute a JOIN pg_collation co ON co.oid = a.attcollation
              WHERE a.attrelid = relation AND a.attname = chk.key_column AND NOT co.collisdeterministic) THEN
    RAISE EXCEPTION 'registration refused: the primary key''s collation must be deterministic' USING ERRCODE = 'SY400';
  END IF;
  cols := synchro._check_columns(relation, chk.key_column, columns);

  INSERT INTO synchro.relation (relid, schema_name, table_name, registration_kind, table_id,
                                key_column, key_type, key_pg_type, staged_generation)
  VALUES (relation, chk.schema_name, chk.table_name, kind, table_id,
          chk.key_column, chk.key_type, chk.key_pg_type, g)
  RETURNING relation_id INTO rid;
  INSERT INTO synchro.registration (generation, relation_id, columns) VALUES (g, rid, cols);
  RETURN rid;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_registration(regclass, text, text, name[]) FROM PUBLIC;

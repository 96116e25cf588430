-- Stages, in the pending generation, a new physical relation for a registered relation
-- whose table was dropped and recreated (readiness: relation_missing): the logical
-- identity (relation_id, table_id, key) stays, the OID and qualified name become the new
-- table's at activation. The old table must be gone (a live relation is never
-- reinterpreted as another one), and the new one must have the same key column and key
-- type and pass the registration rules. Its rows are staged by the projection bootstrap
-- at activation (docs/bootstrap.md); their versions are new.
CREATE OR REPLACE FUNCTION synchro.rebind_relation(relation_id bigint, relation regclass) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint;
  r synchro.relation;
  chk record;
BEGIN
  IF relation IS NULL THEN
    RAISE EXCEPTION 'rebind refused: relation is required' USING ERRCODE = 'SY400';
  END IF;
  IF NOT coalesce(has_table_privilege(synchro._invoker(), relation, 'SELECT'), true) THEN
    RAISE EXCEPTION 'rebind refused: the calling role may not SELECT the relation' USING ERRCODE = 'SY400';
  END IF;
  g := synchro._pending_generation();
  SELECT rel.* INTO r FROM synchro.relation rel JOIN synchro.registration reg
      ON reg.relation_id = rel.relation_id AND reg.generation = g
   WHERE rel.relation_id = rebind_relation.relation_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'rebind refused: relation_id is not registered in the pending generation' USING ERRCODE = 'SY400';
  END IF;
  IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = r.relid) THEN
    RAISE EXCEPTION 'rebind refused: the registered relation still exists (rebind is for a dropped and recreated table)'
      USING ERRCODE = 'SY400';
  END IF;
  IF EXISTS (SELECT 1 FROM synchro.relation x WHERE x.relid = relation) THEN
    RAISE EXCEPTION 'rebind refused: relation is already registered' USING ERRCODE = 'SY400';
  END IF;
  -- Another relation's rebind staged to the same table: two registrations of one table
  -- would fail the activation with 23505 (relation_registered_once).
  IF EXISTS (SELECT 1 FROM synchro.relation_rebind b
              WHERE b.generation = g AND b.relid = relation AND b.relation_id <> rebind_relation.relation_id) THEN
    RAISE EXCEPTION 'rebind refused: relation is the new table of another relation''s rebind' USING ERRCODE = 'SY400';
  END IF;
  -- This transaction's own changes of the old table would be decoded after the
  -- activation changed the relation's OID (they commit with it, past the position
  -- recorded below), matched no relation and blocked the stream (unknown_relation):
  -- they must commit first (TestRegistryRebindAfterWritingTheOldTable, found by review
  -- 2026-12-05). The fence records its transaction on the row's reservation; a
  -- transaction with no xid wrote nothing. Other transactions' changes of the old table
  -- committed before its DROP, so before the position recorded below.
  IF pg_current_xact_id_if_assigned() IS NOT NULL
     AND EXISTS (SELECT 1 FROM synchro.row_version v
                  WHERE v.relation_id = r.relation_id AND v.fence_txid = pg_current_xact_id_if_assigned()) THEN
    RAISE EXCEPTION 'rebind refused: this transaction changed the registered relation before it was dropped; commit those changes first'
      USING ERRCODE = 'SY400';
  END IF;
  chk := synchro._check_relation(relation);
  IF chk.key_column <> r.key_column OR chk.key_pg_type <> r.key_pg_type THEN
    RAISE EXCEPTION 'rebind refused: the new relation''s primary key differs from the registered key' USING ERRCODE = 'SY400';
  END IF;
  INSERT INTO synchro.relation_rebind AS b (generation, relation_id, relid, schema_name, table_name, staged_lsn)
  VALUES (g, r.relation_id, relation, chk.schema_name, chk.table_name, pg_current_wal_insert_lsn())
  ON CONFLICT ON CONSTRAINT relation_rebind_pkey DO UPDATE
    SET relid = excluded.relid, schema_name = excluded.schema_name, table_name = excluded.table_name,
        staged_lsn = excluded.staged_lsn;
END
$$;

REVOKE ALL ON FUNCTION synchro.rebind_relation(bigint, regclass) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.rebind_relation(bigint, regclass) TO synchro_operator;

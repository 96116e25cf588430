-- Called by push (synchro._push_run) inside a mutation's savepoint, after push read the source row
-- as the caller: records which mutation this transaction is applying to that row (read
-- by the fence trigger) and, with lock_row (push passes it only for a row the caller
-- could read), locks the row's identity reservation (the same row every fence locks, so
-- a direct write and a push cannot both advance one prior version) and returns the
-- current version and whether it is a deletion version.
--
-- Executable by synchro_app only because push must call it as the caller (CONTRACT.md,
-- Roles). It holds the contract's invariants itself: it refuses any caller but push
-- (which reads the row under the caller's privileges and row-level security before it
-- asks for the lock and the version), a relation that is not an active synced
-- registration, and a calling role without SELECT on that relation; the push context it
-- records is keyed by the current transaction.
CREATE OR REPLACE FUNCTION synchro._push_enter(
  client_id text, mutation_id uuid, relation_id bigint, pk text, lock_row boolean,
  OUT version text, OUT deleted boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rel      oid;
  readable boolean;
BEGIN
  IF NOT synchro._called_from_push() THEN
    RAISE EXCEPTION 'push helpers are called by synchro.push only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT r.relid INTO rel
    FROM synchro.relation r
    JOIN synchro.registration g ON g.relation_id = r.relation_id
    JOIN synchro.registry_generation rg ON rg.generation = g.generation AND rg.state = 'active'
   WHERE r.relation_id = _push_enter.relation_id AND r.registration_kind = 'synced';
  -- Only a refusal of this caller is insufficient_privilege: push records that as the
  -- mutation's rejection, for ever. A registration an activation ended during the call
  -- (push checked table_id before) or a registered table dropped (the window of a
  -- rebind) is not the mutation's fault: the whole call fails, nothing is recorded, and
  -- the same mutation is accepted once the table is rebound (CONTRACT.md, Push;
  -- TestOperateEdgePushDuringRebindWindow).
  IF NOT FOUND THEN
    RAISE EXCEPTION 'push: the table_id is no longer an active synced registration (an activation committed during the call)'
      USING ERRCODE = 'SY400';
  END IF;
  readable := has_table_privilege(synchro._invoker(), rel, 'SELECT');
  IF readable IS NULL THEN
    RAISE EXCEPTION 'push: relation drift: the registered table was dropped (rebind or unregister it, then activate)'
      USING ERRCODE = 'feature_not_supported';
  END IF;
  IF NOT readable THEN
    RAISE EXCEPTION 'push: the calling role may not read this relation' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF lock_row THEN
    SELECT r.version, r.deleted INTO version, deleted
      FROM synchro.row_version r
     WHERE r.relation_id = _push_enter.relation_id AND r.pk = _push_enter.pk
       FOR UPDATE;
    IF NOT FOUND THEN
      -- A row push could read has no reservation yet: a table holding rows was
      -- registered on a running stream and its projection bootstrap has not versioned
      -- them (synchro.runner_bootstrap_versions). A conflict carried a null version
      -- with the row present, which no base_version can ever match
      -- (TestPushToUnversionedRowDuringBootstrap, found by review 2026-12-05). It gets
      -- its version here, as the bootstrap would give it (which keeps a version that
      -- exists: ON CONFLICT DO NOTHING), and the reservation is locked as for any row.
      INSERT INTO synchro.row_version AS r (relation_id, pk, version)
      VALUES (_push_enter.relation_id, _push_enter.pk, synchro._new_version())
      ON CONFLICT ON CONSTRAINT row_version_pkey DO NOTHING;
      SELECT r.version, r.deleted INTO version, deleted
        FROM synchro.row_version r
       WHERE r.relation_id = _push_enter.relation_id AND r.pk = _push_enter.pk
         FOR UPDATE;
    END IF;
  END IF;
  -- A hint for the fence trigger that a push context may exist in this transaction
  -- (the row below is what counts; the setting only spares direct writes the lookup).
  PERFORM set_config('synchro.push_active', 'on', true);
  INSERT INTO synchro.push_context AS c (txid, client_id, mutation_id, relation_id, pk)
  VALUES (pg_current_xact_id(), client_id, mutation_id, relation_id, pk)
  ON CONFLICT (txid) DO UPDATE
    SET client_id = excluded.client_id, mutation_id = excluded.mutation_id,
        relation_id = excluded.relation_id, pk = excluded.pk;
END
$$;

REVOKE ALL ON FUNCTION synchro._push_enter(text, uuid, bigint, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_enter(text, uuid, bigint, text, boolean) TO synchro_app;

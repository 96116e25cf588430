-- Called by synchro.push inside a mutation's savepoint, after push locked the source
-- row: locks the row's identity reservation (the same row every fence locks, so a
-- direct write and a push cannot both advance one prior version), records which
-- mutation this transaction is applying to that row (read by the fence trigger), and
-- returns the current version and whether it is a deletion version.
CREATE OR REPLACE FUNCTION synchro._push_enter(
  client_id text, mutation_id uuid, relation_id bigint, pk text,
  OUT version text, OUT deleted boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  SELECT r.version, r.deleted INTO version, deleted
    FROM synchro.row_version r
   WHERE r.relation_id = _push_enter.relation_id AND r.pk = _push_enter.pk
     FOR UPDATE;
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

REVOKE ALL ON FUNCTION synchro._push_enter(text, uuid, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_enter(text, uuid, bigint, text) TO synchro_app;

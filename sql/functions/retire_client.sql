-- Operator: retires a client id (docs/sql/retire_client.md). Deletes the client's push
-- outcomes and write fences and records the id in synchro.retired_client, so push
-- refuses it from then on with SY409: the old device continues as a new client (a new
-- id, a rebuild). Pull and rebuild are not refused (cursors are not bound to a
-- client). Idempotent: retiring a retired id deletes whatever is left of it.
--
-- It takes the client's advisory lock exclusively; every push holds it shared for its
-- transaction (synchro._push_prepare), so a push of this client either committed
-- before (its outcomes and fences are deleted here) or starts after and sees the
-- retirement. A REPEATABLE READ or SERIALIZABLE push whose snapshot is older than this
-- retirement cannot see it; compaction deletes what such a push wrote.
CREATE OR REPLACE FUNCTION synchro.retire_client(client_id text) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  already  boolean;
  outcomes bigint;
  fences   bigint;
BEGIN
  IF client_id IS NULL OR length(client_id) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'retire_client: client_id must be 1 to 256 characters' USING ERRCODE = 'SY400';
  END IF;
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.client/' || client_id, synchro._lock_seed()));
  INSERT INTO synchro.retired_client AS c (client_id) VALUES (retire_client.client_id)
  ON CONFLICT ON CONSTRAINT retired_client_pkey DO NOTHING;
  already := NOT FOUND;
  DELETE FROM synchro.mutation_outcome o WHERE o.client_id = retire_client.client_id;
  GET DIAGNOSTICS outcomes = ROW_COUNT;
  -- Pending fences too: nothing gates on a retired client any more; materialization
  -- covers only the fences it finds.
  DELETE FROM synchro.write_fence w WHERE w.client_id = retire_client.client_id;
  GET DIAGNOSTICS fences = ROW_COUNT;
  RETURN jsonb_build_object('already_retired', already, 'deleted_outcomes', outcomes, 'deleted_write_fences', fences);
END
$$;

REVOKE ALL ON FUNCTION synchro.retire_client(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.retire_client(text) TO synchro_operator;

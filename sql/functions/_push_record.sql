-- Records a decided mutation's outcome, kept as long as the client exists (retention of
-- the change stream never touches it), and returns it.
--
-- Refuses any caller but push (synchro._called_from_push), and holds the contract's
-- invariant itself: an accepted outcome is recorded only when the write fence of that
-- mutation, with that version, was written in this very transaction (write_fence.txid),
-- so no accepted outcome exists without its write, and nothing is recorded for another
-- transaction's write. A push whose write left no fence (the fence trigger disabled by
-- the table's owner, say) fails as a whole: its change would never reach pull.
CREATE OR REPLACE FUNCTION synchro._push_record(client_id text, mutation_id uuid, content_hash text, outcome jsonb)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF NOT synchro._called_from_push() THEN
    RAISE EXCEPTION 'push helpers are called by synchro.push only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF outcome ->> 'id' IS DISTINCT FROM mutation_id::text
     OR NOT coalesce(outcome ->> 'status' = ANY (ARRAY['accepted', 'conflict', 'rejected']), false) THEN
    RAISE EXCEPTION 'push: an outcome must name its mutation and be accepted, conflict or rejected'
      USING ERRCODE = 'internal_error';
  END IF;
  IF outcome ->> 'status' = 'accepted' AND NOT EXISTS (
       SELECT 1 FROM synchro.write_fence f
        WHERE f.mutation_id = _push_record.mutation_id AND f.coverage IS NULL
          AND f.client_id = _push_record.client_id AND f.txid = pg_current_xact_id()
          AND f.version = outcome ->> 'version') THEN
    RAISE EXCEPTION 'push: an accepted mutation has no write fence of its key in this transaction (the table''s fence trigger is disabled, or a BEFORE trigger changed the key)'
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  -- Another push of this mutation decided it first. Under READ COMMITTED this push saw
  -- that outcome after the mutation's lock (synchro._push_prepare) and never gets here;
  -- at REPEATABLE READ or SERIALIZABLE its snapshot may predate that commit, and the
  -- outcome's key then collided here with 23505 (unique_violation), which tells a client
  -- its data is wrong. It is a serialization failure: retried, the push replays the
  -- recorded outcome. ON CONFLICT raises 40001 itself for a row the snapshot cannot see
  -- (TestPushConcurrency/SameMutationConcurrently/repeatableread). A row it can see was
  -- seen by synchro._push_prepare, which replays it instead of getting here: skipping
  -- it would be a broken invariant, not a retry.
  INSERT INTO synchro.mutation_outcome (client_id, mutation_id, content_hash, outcome)
  VALUES (client_id, mutation_id, decode(content_hash, 'hex'), outcome)
  ON CONFLICT ON CONSTRAINT mutation_outcome_pkey DO NOTHING;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'push: an outcome for this mutation exists that the push did not replay'
      USING ERRCODE = 'internal_error';
  END IF;
  RETURN outcome;
END
$$;

REVOKE ALL ON FUNCTION synchro._push_record(text, uuid, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_record(text, uuid, text, jsonb) TO synchro_app;

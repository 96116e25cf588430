-- Ends a mutation's push context and returns the version the fence allocated for the
-- row's write in this transaction (NULL when the row was not fenced in this
-- transaction: push uses it only for an accepted write). Refuses any caller but push
-- (synchro._called_from_push), and never returns a version written by another
-- transaction.
CREATE OR REPLACE FUNCTION synchro._push_leave(relation_id bigint, pk text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v text;
BEGIN
  IF NOT synchro._called_from_push() THEN
    RAISE EXCEPTION 'push helpers are called by synchro.push only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  DELETE FROM synchro.push_context WHERE txid = pg_current_xact_id();
  SELECT r.version INTO v FROM synchro.row_version r
   WHERE r.relation_id = _push_leave.relation_id AND r.pk = _push_leave.pk
     AND r.fence_txid = pg_current_xact_id();
  RETURN v;
END
$$;

REVOKE ALL ON FUNCTION synchro._push_leave(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_leave(bigint, text) TO synchro_app;

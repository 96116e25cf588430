-- Read-your-writes gate: a client with an accepted push fence that neither WAL
-- materialization nor activated baseline coverage represents gets SY503, and nothing
-- (page, session, cursor, checksum) advances.
CREATE OR REPLACE FUNCTION synchro._capture_pending(client_id text) RETURNS void
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM synchro.write_fence w WHERE w.client_id = _capture_pending.client_id AND w.coverage IS NULL) THEN
    RAISE EXCEPTION 'capture_pending: an accepted push of this client is not materialized yet; retry later'
      USING ERRCODE = 'SY503';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._capture_pending(text) FROM PUBLIC;

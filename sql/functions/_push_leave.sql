-- Ends a mutation's push context and returns the row's version now (the version the
-- fence allocated, for an accepted write).
CREATE OR REPLACE FUNCTION synchro._push_leave(relation_id bigint, pk text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  v text;
BEGIN
  DELETE FROM synchro.push_context WHERE txid = pg_current_xact_id();
  SELECT r.version INTO v FROM synchro.row_version r
   WHERE r.relation_id = _push_leave.relation_id AND r.pk = _push_leave.pk;
  RETURN v;
END
$$;

REVOKE ALL ON FUNCTION synchro._push_leave(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_leave(bigint, text) TO synchro_app;

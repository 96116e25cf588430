-- BEFORE TRUNCATE statement guard: a truncate has no row-by-row interpretation in the
-- change stream, so it is refused at the source. A TRUNCATE that bypasses triggers
-- (session_replication_role = replica) still blocks capture on the WAL side.
CREATE OR REPLACE FUNCTION synchro._refuse_truncate() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'TRUNCATE of a registered relation is not supported' USING ERRCODE = 'feature_not_supported';
END
$$;

REVOKE ALL ON FUNCTION synchro._refuse_truncate() FROM PUBLIC;

-- True only when synchro.readiness() reports all eleven checks, every one ok. The same
-- checks without the consumer groups' lag listing (synchro._readiness(false)): probes
-- call this, and never read the groups' change record.
CREATE OR REPLACE FUNCTION synchro.ready() RETURNS boolean
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(pg_catalog.count(*) = 11 AND pg_catalog.bool_and(r.ok), false)
    FROM synchro._readiness(false) r
$$;

REVOKE ALL ON FUNCTION synchro.ready() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.ready() TO synchro_app, synchro_runner;

-- Fail-closed readiness (CONTRACT.md "Readiness", ADR 001 "Readiness"): always the
-- eleven rows, in the contract's order, each deciding one condition; the progress row
-- also lists each consumer group's lag, deciding nothing (docs/sql/readiness.md). The
-- checks are synchro._readiness's, shared with synchro.ready().
CREATE OR REPLACE FUNCTION synchro.readiness()
RETURNS TABLE (check_name text, ok boolean, detail text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RETURN QUERY SELECT r.check_name, r.ok, r.detail FROM synchro._readiness(true) r;
END
$$;

REVOKE ALL ON FUNCTION synchro.readiness() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.readiness() TO synchro_app, synchro_runner;

-- synchro.release_lease (CONTRACT.md "Consumer groups"; docs/sql/release_lease.md).
-- Ends the lease at once, so another owner may take over without waiting for the
-- expiry. The holder may release a lease that expired if nobody took over since; a
-- token that is not the current lease is SY412. The outstanding batch ends unacknowledged.
CREATE OR REPLACE FUNCTION synchro.release_lease(name text, token bigint)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g synchro.consumer_group_state;
BEGIN
  g := synchro._consumer_leased(name, token, false);
  UPDATE synchro.consumer_group_state cg
     SET lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, handed_through = NULL
   WHERE cg.name = g.name;
END
$$;

REVOKE ALL ON FUNCTION synchro.release_lease(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.release_lease(text, bigint) TO synchro_consumer;

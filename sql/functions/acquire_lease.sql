-- synchro.acquire_lease (CONTRACT.md "Consumer groups"; docs/sql/acquire_lease.md).
-- A database-clock lease on the group and its fencing token, one more than the last
-- the group handed out (a group's tokens never coincide with another group's). While another owner's lease is unexpired: 55P03, nothing
-- changed. The same owner calling again renews: a new token and a new expiry; its
-- outstanding batch stays acknowledgeable with the new token. A new owner starts with
-- nothing outstanding (it reads before it may ack).
CREATE OR REPLACE FUNCTION synchro.acquire_lease(name text, owner text, lease_seconds int)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g     synchro.consumer_group_state;
  now_  timestamptz := clock_timestamp();
  tok   bigint;
BEGIN
  IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
    RAISE EXCEPTION 'invalid_argument: name must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
  END IF;
  IF owner IS NULL OR length(owner) NOT BETWEEN 1 AND 200 OR owner ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'invalid_argument: owner must be 1 to 200 characters without control characters'
      USING ERRCODE = 'SY400';
  END IF;
  IF lease_seconds IS NULL OR lease_seconds NOT BETWEEN 1 AND 86400 THEN
    RAISE EXCEPTION 'invalid_argument: lease_seconds must be 1 to 86400' USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO g FROM synchro.consumer_group_state cg WHERE cg.name = acquire_lease.name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'invalid_argument: unknown consumer group' USING ERRCODE = 'SY400';
  END IF;
  IF g.removed_at IS NOT NULL THEN
    RAISE EXCEPTION 'invalid_argument: the consumer group was removed' USING ERRCODE = 'SY400';
  END IF;
  -- The lock was taken after now_ was read: compare with the clock after the wait.
  now_ := clock_timestamp();
  IF g.lease_owner IS NOT NULL AND g.lease_owner <> owner AND g.lease_expires_at > now_ THEN
    RAISE EXCEPTION 'lock_not_available: another owner holds an unexpired lease on the consumer group'
      USING ERRCODE = '55P03';
  END IF;
  -- A group's tokens are group_no * 2^32 + 1, + 2, ... (synchro.consumer_group_state):
  -- strictly increasing, and never another group's.
  tok := CASE WHEN g.last_token = 0 THEN g.group_no * 4294967296 + 1 ELSE g.last_token + 1 END;
  UPDATE synchro.consumer_group_state cg
     SET last_token = tok, lease_token = tok, lease_owner = owner,
         lease_expires_at = now_ + make_interval(secs => lease_seconds),
         handed_through = CASE WHEN g.lease_owner = owner THEN g.handed_through END
   WHERE cg.name = g.name;
  RETURN tok;
END
$$;

REVOKE ALL ON FUNCTION synchro.acquire_lease(text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.acquire_lease(text, text, int) TO synchro_consumer;

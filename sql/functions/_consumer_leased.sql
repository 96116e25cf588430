-- The group `name`, locked FOR UPDATE (acknowledgement and reads are compare-and-swap
-- on this row), after the fencing check every leased call makes: `token` must be the
-- group's current lease token, and with unexpired the lease must not have expired by
-- the database clock. SY400 for a malformed or unknown name; SY412 lease_lost
-- otherwise (a removed group has no lease, so every token is lost). A group created
-- before the stream existed adopts the generation_start of the first stream generation
-- here.
CREATE OR REPLACE FUNCTION synchro._consumer_leased(name text, token bigint, unexpired boolean)
RETURNS synchro.consumer_group_state
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  g synchro.consumer_group_state;
BEGIN
  IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
    RAISE EXCEPTION 'invalid_argument: name must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO g FROM synchro.consumer_group_state cg WHERE cg.name = _consumer_leased.name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'invalid_argument: unknown consumer group' USING ERRCODE = 'SY400';
  END IF;
  IF token IS NULL OR g.lease_token IS DISTINCT FROM token
     OR (unexpired AND g.lease_expires_at <= pg_catalog.clock_timestamp()) THEN
    RAISE EXCEPTION 'lease_lost: the token is not the current lease of the consumer group' USING ERRCODE = 'SY412';
  END IF;
  IF g.stream_generation IS NULL THEN
    -- The first stream generation's start, which is where such a group begins (and
    -- what synchro._consumer_floor protected for it): adopting the active generation
    -- after a stream reset skipped the first generation's changes without the SY409
    -- every other group of it gets (TestConsumerGroupCreatedBeforeStreamAcrossReset).
    -- With the first generation's start, read_changes says SY409 then.
    UPDATE synchro.consumer_group_state cg
       SET stream_generation = sg.stream_generation, checkpoint_lsn = sg.generation_start_lsn
      FROM (SELECT x.stream_generation, x.generation_start_lsn FROM synchro.stream_generation x
             ORDER BY x.stream_generation LIMIT 1) sg
     WHERE cg.name = g.name
    RETURNING cg.* INTO g;
    IF NOT FOUND THEN
      SELECT * INTO g FROM synchro.consumer_group_state cg WHERE cg.name = _consumer_leased.name;
    END IF;
  END IF;
  RETURN g;
END
$$;

REVOKE ALL ON FUNCTION synchro._consumer_leased(text, bigint, boolean) FROM PUBLIC;

-- synchro.ack (CONTRACT.md "Consumer groups"; docs/sql/ack.md). Compare-and-swap on
-- the group's checkpoint under its row lock: the token must still be the current,
-- unexpired lease (SY412 otherwise, nothing changed), and the position one the group's
-- outstanding batch handed out after the checkpoint (SY400 otherwise).
CREATE OR REPLACE FUNCTION synchro.ack(name text, token bigint, "position" text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g    synchro.consumer_group_state;
  pgen bigint;
  plsn pg_lsn;
BEGIN
  g := synchro._consumer_leased(name, token, true);
  -- Parsed only in the exact shape read_changes writes, so no input fails with a cast
  -- error instead of SY400.
  IF ack.position IS NULL OR ack.position !~ '^[0-9]{1,18}:[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$' THEN
    RAISE EXCEPTION 'invalid_argument: malformed position' USING ERRCODE = 'SY400';
  END IF;
  pgen := split_part(ack.position, ':', 1)::bigint;
  plsn := split_part(ack.position, ':', 2)::pg_lsn;
  IF g.stream_generation IS NULL OR pgen <> g.stream_generation OR plsn <= g.checkpoint_lsn
     OR g.handed_through IS NULL OR plsn > g.handed_through
     OR NOT EXISTS (SELECT 1 FROM synchro.change c
                     WHERE c.stream_generation = pgen AND c.commit_lsn = plsn
                       AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))) THEN
    RAISE EXCEPTION 'invalid_argument: the position was not handed to this consumer group after its checkpoint'
      USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.consumer_group_state cg
     SET checkpoint_lsn = plsn, acked_at = now(),
         handed_through = CASE WHEN plsn < g.handed_through THEN g.handed_through END
   WHERE cg.name = g.name;
END
$$;

REVOKE ALL ON FUNCTION synchro.ack(text, bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.ack(text, bigint, text) TO synchro_consumer;

-- synchro.read_changes (CONTRACT.md "Consumer groups"; docs/sql/read_changes.md).
-- Whole source transactions after the group's checkpoint, in commit order: at most
-- max_transactions, and no more than max_bytes except that the first transaction always
-- comes whole. A transaction is never split. The read is the group's one outstanding
-- batch: it replaces the previous one (a read always starts at the checkpoint, so
-- reading again without an ack delivers the same transactions again), and ack accepts
-- only positions up to its last transaction.
--
-- Cost: one range scan of synchro.change's primary key from the checkpoint, over at most
-- max_transactions + 1 transactions (the one after tells has_more).
CREATE OR REPLACE FUNCTION synchro.read_changes(name text, token bigint, max_transactions int, max_bytes int)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- commit_time renders the same whatever the caller's session settings.
SET "TimeZone" TO 'UTC'
AS $$
DECLARE
  g       synchro.consumer_group_state;
  gen     bigint;
  horizon pg_lsn;
  lsns    pg_lsn[];
  times   timestamptz[];
  more    boolean;
  txns    jsonb;
BEGIN
  IF max_transactions IS NULL OR max_transactions NOT BETWEEN 1 AND 10000 THEN
    RAISE EXCEPTION 'invalid_argument: max_transactions must be 1 to 10000' USING ERRCODE = 'SY400';
  END IF;
  IF max_bytes IS NULL OR max_bytes < 1 THEN
    RAISE EXCEPTION 'invalid_argument: max_bytes must be at least 1' USING ERRCODE = 'SY400';
  END IF;
  g := synchro._consumer_leased(name, token, true);
  IF g.stream_generation IS NULL THEN
    -- No stream yet: nothing to read.
    UPDATE synchro.consumer_group_state cg SET handed_through = NULL WHERE cg.name = g.name;
    RETURN jsonb_build_object('transactions', '[]'::jsonb, 'has_more', false);
  END IF;

  -- SY409: the checkpoint's changes are gone. Another stream generation (a stream
  -- reset), or compaction passed the checkpoint after an explicit destructive release
  -- (synchro.release_consumer_retention): a group that holds back compaction is never
  -- passed by a change it has not acknowledged (synchro._consumer_floor).
  SELECT p.stream_generation INTO gen FROM synchro.progress p;
  IF gen IS DISTINCT FROM g.stream_generation THEN
    RAISE EXCEPTION 'rebuild_required: the consumer group''s checkpoint belongs to another stream generation; recreate the group'
      USING ERRCODE = 'SY409';
  END IF;
  SELECT r.horizon_commit_lsn INTO horizon FROM synchro.change_retention r WHERE r.stream_generation = gen;
  IF g.retention_released_at IS NOT NULL AND horizon > g.checkpoint_lsn THEN
    RAISE EXCEPTION 'rebuild_required: the consumer group''s checkpoint is older than the retention horizon; recreate the group'
      USING ERRCODE = 'SY409';
  END IF;

  -- The transactions of this read: each transaction's size is the JSON text length of
  -- its row images and keys; the running total decides where the read stops.
  WITH tx AS MATERIALIZED (
    SELECT c.commit_lsn, min(c.commit_time) AS commit_time,
           sum(coalesce(octet_length(c.image::text), 0) + octet_length(c.pk))::bigint AS bytes
      FROM synchro.change c
     WHERE c.stream_generation = gen AND c.commit_lsn > g.checkpoint_lsn
       AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))
     GROUP BY c.commit_lsn
     ORDER BY c.commit_lsn
     LIMIT max_transactions + 1),
  s AS (
    SELECT tx.commit_lsn, tx.commit_time, row_number() OVER w AS rn, sum(tx.bytes) OVER w AS running
      FROM tx
    WINDOW w AS (ORDER BY tx.commit_lsn ROWS UNBOUNDED PRECEDING))
  SELECT array_agg(s.commit_lsn ORDER BY s.rn) FILTER (WHERE s.rn <= max_transactions AND (s.rn = 1 OR s.running <= max_bytes)),
         array_agg(s.commit_time ORDER BY s.rn) FILTER (WHERE s.rn <= max_transactions AND (s.rn = 1 OR s.running <= max_bytes)),
         coalesce(bool_or(NOT (s.rn <= max_transactions AND (s.rn = 1 OR s.running <= max_bytes))), false)
    INTO lsns, times, more
    FROM s;

  SELECT coalesce(jsonb_agg(jsonb_build_object('position', gen::text || ':' || x.l::text,
                                               'commit_time', x.ct,
                                               'changes', ch.changes) ORDER BY x.i), '[]'::jsonb)
    INTO txns
    FROM unnest(lsns, times) WITH ORDINALITY AS x(l, ct, i)
    CROSS JOIN LATERAL (
      SELECT jsonb_agg(jsonb_build_object(
               'change_id', gen::text || ':' || c.commit_lsn::text || ':' || c.event_ordinal::text,
               'table', c.table_id,
               'pk', CASE WHEN r.key_type = 'string' THEN to_jsonb(c.pk) ELSE to_jsonb(c.pk::bigint) END,
               'op', c.op,
               'version', c.version,
               'row', c.image) ORDER BY c.event_ordinal) AS changes
        FROM synchro.change c
        JOIN synchro.relation r ON r.relation_id = c.relation_id
       WHERE c.stream_generation = gen AND c.commit_lsn = x.l
         AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))) ch;

  -- The outstanding batch ends at this read's last transaction.
  UPDATE synchro.consumer_group_state cg SET handed_through = lsns[cardinality(lsns)] WHERE cg.name = g.name;
  RETURN jsonb_build_object('transactions', txns, 'has_more', more);
END
$$;

REVOKE ALL ON FUNCTION synchro.read_changes(text, bigint, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.read_changes(text, bigint, int, int) TO synchro_consumer;

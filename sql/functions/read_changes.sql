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
  lsns     pg_lsn[];
  last_lsn pg_lsn;
  cut      boolean;
  more     boolean;
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

  -- The transactions this read may deliver: the first max_transactions (+ 1, to
  -- tell has_more) after the checkpoint, from the primary key in order.
  SELECT array_agg(x.commit_lsn ORDER BY x.commit_lsn) INTO lsns
    FROM (SELECT DISTINCT c.commit_lsn FROM synchro.change c
           WHERE c.stream_generation = gen AND c.commit_lsn > g.checkpoint_lsn
             AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))
           ORDER BY c.commit_lsn
           LIMIT max_transactions + 1) x;
  more := coalesce(cardinality(lsns), 0) > max_transactions;
  IF lsns IS NULL THEN
    txns := '[]'::jsonb;
  ELSE
    -- One range scan of their changes. A transaction's size is the JSON text length of
    -- its row images and keys; the running total at the end of each transaction
    -- decides where the read stops (the first transaction always comes whole).
    WITH c AS (
      SELECT c.commit_lsn, c.event_ordinal, c.commit_time, c.table_id, c.pk, c.op, c.version, c.image, r.key_type,
             dense_rank() OVER w AS tn,
             sum(coalesce(octet_length(c.image::text), 0) + octet_length(c.pk)) OVER w AS running
        FROM synchro.change c
        JOIN synchro.relation r ON r.relation_id = c.relation_id
       WHERE c.stream_generation = gen AND c.commit_lsn > g.checkpoint_lsn
         AND c.commit_lsn <= lsns[least(cardinality(lsns), max_transactions)]
         AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))
      WINDOW w AS (ORDER BY c.commit_lsn)),
    kept AS (
      SELECT * FROM c WHERE c.tn = 1 OR c.running <= max_bytes),
    tx AS (
      SELECT k.commit_lsn,
             jsonb_build_object(
               'position', gen::text || ':' || k.commit_lsn::text,
               'commit_time', min(k.commit_time),
               'changes', jsonb_agg(jsonb_build_object(
                 'change_id', gen::text || ':' || k.commit_lsn::text || ':' || k.event_ordinal::text,
                 'table', k.table_id,
                 'pk', CASE WHEN k.key_type = 'string' THEN to_jsonb(k.pk) ELSE to_jsonb(k.pk::bigint) END,
                 'op', k.op,
                 'version', k.version,
                 'row', k.image) ORDER BY k.event_ordinal)) AS obj
        FROM kept k
       GROUP BY k.commit_lsn)
    SELECT jsonb_agg(tx.obj ORDER BY tx.commit_lsn), max(tx.commit_lsn),
           count(*) < least(cardinality(lsns), max_transactions)
      INTO txns, last_lsn, cut
      FROM tx;
    more := more OR cut;
  END IF;

  -- A released group's horizon again, after the read: each statement above took its
  -- own snapshot, and a compaction that committed between the horizon check and the
  -- read of the changes deleted transactions the read then skipped, as a page that
  -- passed for complete (TestConsumerGroupReleasedReadRacesCompact). Passed now, the
  -- checkpoint is stale whatever the read saw.
  IF g.retention_released_at IS NOT NULL THEN
    SELECT r.horizon_commit_lsn INTO horizon FROM synchro.change_retention r WHERE r.stream_generation = gen;
    IF horizon > g.checkpoint_lsn THEN
      RAISE EXCEPTION 'rebuild_required: the consumer group''s checkpoint is older than the retention horizon; recreate the group'
        USING ERRCODE = 'SY409';
    END IF;
  END IF;

  -- The stream generation again, after the read, for the same reason: a reset activated
  -- after the check above retires this generation, and a compaction that committed
  -- after it deletes the retired generation's changes whatever the groups acknowledged
  -- (synchro._consumer_compact), so the read may have seen part of them. The group
  -- reads SY409 from now on anyway; this read does too, rather than hand out a split
  -- transaction (found by reading, review 2026-12-05; no test forces the interleaving).
  IF (SELECT p.stream_generation FROM synchro.progress p) IS DISTINCT FROM gen THEN
    RAISE EXCEPTION 'rebuild_required: the consumer group''s checkpoint belongs to another stream generation; recreate the group'
      USING ERRCODE = 'SY409';
  END IF;
  -- The outstanding batch ends at this read's last transaction.
  UPDATE synchro.consumer_group_state cg SET handed_through = last_lsn WHERE cg.name = g.name;
  RETURN jsonb_build_object('transactions', coalesce(txns, '[]'::jsonb), 'has_more', more);
END
$$;

REVOKE ALL ON FUNCTION synchro.read_changes(text, bigint, int, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.read_changes(text, bigint, int, int) TO synchro_consumer;

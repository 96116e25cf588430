-- How far compaction may delete the change record of stream generation gen without
-- passing a consumer group: the highest commit LSN that may go (NULL: no group limits
-- it). For each group that holds back compaction (not removed, or removed within the
-- resume window; and not released by synchro.release_consumer_retention) that is
-- everything before its first unacknowledged change of its tables. Changes of other
-- tables between its checkpoint and that change are never delivered to it, so a group
-- whose tables are quiet does not pin the record (and its reads stay valid: read_changes
-- answers SY409 only for a released group).
--
-- Takes the consumer-group floor lock shared until the caller's transaction ends
-- (synchro._consumer_lock_key): a group created at `earliest` meanwhile waits and then
-- reads the horizon the caller records. Call it in the transaction that records the
-- horizon and deletes.
CREATE OR REPLACE FUNCTION synchro._consumer_floor(gen bigint) RETURNS pg_lsn
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  window_s bigint;
  start    pg_lsn;
  floor_   pg_lsn;
BEGIN
  PERFORM pg_advisory_xact_lock_shared(synchro._consumer_lock_key());
  SELECT s.value::bigint INTO window_s FROM synchro.setting s WHERE s.name = 'consumer_group_resume_window_seconds';
  SELECT sg.generation_start_lsn INTO start FROM synchro.stream_generation sg WHERE sg.stream_generation = gen;
  SELECT min(f.first_pending - 1) INTO floor_
    FROM synchro.consumer_group_state g
    CROSS JOIN LATERAL (
      SELECT min(c.commit_lsn) AS first_pending FROM synchro.change c
       WHERE c.stream_generation = gen
         AND c.commit_lsn > coalesce(g.checkpoint_lsn, start)
         AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))) f
   WHERE g.retention_released_at IS NULL
     -- A missing window setting protects removed groups for ever (fail closed).
     AND (g.removed_at IS NULL OR window_s IS NULL OR g.removed_at + make_interval(secs => window_s) > now())
     AND (g.stream_generation = gen OR g.stream_generation IS NULL);
  RETURN floor_;
END
$$;

REVOKE ALL ON FUNCTION synchro._consumer_floor(bigint) FROM PUBLIC;

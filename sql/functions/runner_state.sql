-- What the runner needs at (re)start and at each loop: the active stream, its durable
-- progress and the blocking poison, if any (with the count of retry requests made for it,
-- synchro.runner_poison's attempt_seq), and the output plugin the stream records. No rows before the first stream exists.
CREATE OR REPLACE FUNCTION synchro.runner_state()
RETURNS TABLE (stream_generation bigint, slot_name text, generation_start_lsn pg_lsn,
               materialized_commit_lsn pg_lsn, processed_end_lsn pg_lsn, acknowledged_end_lsn pg_lsn,
               registry_generation bigint, poison_commit_lsn pg_lsn, poison_class text, retry_requested boolean,
               plugin text, retry_seq bigint)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT p.stream_generation, g.slot_name, p.generation_start_lsn, p.materialized_commit_lsn,
         p.processed_end_lsn, p.acknowledged_end_lsn, p.registry_generation,
         q.commit_lsn, q.failure_class, q.retry_requested, g.plugin, q.retry_seq
    FROM synchro.progress p
    JOIN synchro.stream_generation g ON g.stream_generation = p.stream_generation
    LEFT JOIN LATERAL (
      SELECT q.commit_lsn, q.failure_class, q.retry_requested, q.retry_seq
        FROM synchro.quarantine q
       WHERE q.stream_generation = p.stream_generation AND q.resolved_at IS NULL
       ORDER BY q.commit_lsn
       LIMIT 1) q ON true
$$;

REVOKE ALL ON FUNCTION synchro.runner_state() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_state() TO synchro_runner;

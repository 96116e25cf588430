-- Consumer groups with their checkpoint and lag (CONTRACT.md "Consumer groups";
-- docs/sql/consumer_groups.md). Lag counts what the group still has to read: the
-- transactions after its checkpoint that carry changes of its tables, and the age of
-- the oldest of them (0 when there is none). A removed group's row is its tombstone.
CREATE OR REPLACE VIEW synchro.consumer_groups AS
SELECT g.name,
       coalesce(g.stream_generation, p.stream_generation)::text || ':'
         || coalesce(g.checkpoint_lsn, p.generation_start_lsn)::text AS checkpoint,
       coalesce(l.transactions, 0) AS lag_transactions,
       coalesce(extract(epoch FROM now() - l.oldest), 0)::double precision AS lag_seconds,
       g.lease_owner,
       g.lease_expires_at,
       g.last_token,
       g.removed_at,
       g.table_ids,
       g.acked_at,
       g.retention_released_at,
       g.created_at
  FROM synchro.consumer_group_state g
  LEFT JOIN synchro.progress p ON true
  LEFT JOIN LATERAL (
    SELECT count(DISTINCT c.commit_lsn) AS transactions, min(c.commit_time) AS oldest
      FROM synchro.change c
     WHERE c.stream_generation = coalesce(g.stream_generation, p.stream_generation)
       AND c.commit_lsn > coalesce(g.checkpoint_lsn, p.generation_start_lsn)
       AND (g.table_ids IS NULL OR c.table_id = ANY (g.table_ids))) l ON true;

REVOKE ALL ON synchro.consumer_groups FROM PUBLIC;
-- Consumers watch their own lag, operators their retention, the runner exports each
-- group's lag in /metrics.
GRANT SELECT ON synchro.consumer_groups TO synchro_consumer, synchro_operator, synchro_runner;

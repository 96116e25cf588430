-- Projection bootstraps, for operators (docs/bootstrap.md, docs/sql/bootstrap_status.md):
-- one row per relation a registry activation re-projects ('project') or removes
-- ('remove'), with its lifecycle phase (requested, staging, staged, merged, failed,
-- subsumed), the staging attempts, the exported snapshot's consistent point, the
-- staged row count and the staged rows still waiting to be merged. No row values.
CREATE OR REPLACE VIEW synchro.bootstrap_status AS
SELECT b.generation,
       b.relation_id,
       rel.table_id,
       b.kind,
       b.phase,
       b.attempt,
       b.stream_generation,
       b.consistent_point,
       b.slot_name,
       b.row_count,
       (SELECT count(*) FROM synchro.bootstrap_row s
         WHERE s.generation = b.generation AND s.relation_id = b.relation_id) AS staged_rows,
       (SELECT count(*) FROM synchro.bootstrap_coverage c
         WHERE c.generation = b.generation AND c.relation_id = b.relation_id) AS covered_fences,
       b.detail,
       b.requested_at,
       b.staged_at,
       b.merged_at
  FROM synchro.bootstrap b
  JOIN synchro.relation rel ON rel.relation_id = b.relation_id;

REVOKE ALL ON synchro.bootstrap_status FROM PUBLIC;
GRANT SELECT ON synchro.bootstrap_status TO synchro_operator;

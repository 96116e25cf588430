-- Blocking quarantine records. Redacted by construction (see synchro.quarantine).
CREATE OR REPLACE VIEW synchro.poison AS
SELECT q.stream_generation, q.commit_lsn, q.failure_class, q.relation_id, q.attempts,
       q.first_seen, q.last_seen, q.retry_requested
  FROM synchro.quarantine q
 WHERE q.resolved_at IS NULL;

REVOKE ALL ON synchro.poison FROM PUBLIC;
GRANT SELECT ON synchro.poison TO synchro_operator;

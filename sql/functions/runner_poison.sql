-- Records (or counts again) the blocking quarantine of a source transaction. Written in
-- its own transaction by the runner, so it survives the failed materialization. The
-- record is redacted by construction: positions, a bounded class, a relation id.
--
-- attempt_seq: the retry request (synchro.quarantine.retry_seq, read by runner_state
-- when the session started) under which the failed attempt ran. A request counted
-- past it came while the attempt ran: it stays asked for, and the runner tries again.
-- NULL (a runner of a release before 2026-12-05) clears the request, as then.
CREATE OR REPLACE FUNCTION synchro.runner_poison(
  stream_generation bigint, commit_lsn pg_lsn, failure_class text, relation_id bigint,
  attempt_seq bigint DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  INSERT INTO synchro.quarantine AS q (stream_generation, commit_lsn, failure_class, relation_id)
  VALUES (stream_generation, commit_lsn, failure_class, relation_id)
  ON CONFLICT ON CONSTRAINT quarantine_pkey DO UPDATE
    SET attempts = q.attempts + 1, last_seen = now(), failure_class = excluded.failure_class,
        relation_id = excluded.relation_id,
        -- A record resolved before (and poisoned again) starts over: its old requests
        -- were served.
        retry_requested = q.resolved_at IS NULL AND runner_poison.attempt_seq IS NOT NULL
                          AND q.retry_seq > runner_poison.attempt_seq,
        resolved_at = NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_poison(bigint, pg_lsn, text, bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_poison(bigint, pg_lsn, text, bigint, bigint) TO synchro_runner;

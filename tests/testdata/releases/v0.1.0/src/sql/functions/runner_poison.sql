-- Records (or counts again) the blocking quarantine of a source transaction. Written in
-- its own transaction by the runner, so it survives the failed materialization. The
-- record is redacted by construction: positions, a bounded class, a relation id.
CREATE OR REPLACE FUNCTION synchro.runner_poison(
  stream_generation bigint, commit_lsn pg_lsn, failure_class text, relation_id bigint)
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
        relation_id = excluded.relation_id, retry_requested = false, resolved_at = NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_poison(bigint, pg_lsn, text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_poison(bigint, pg_lsn, text, bigint) TO synchro_runner;

-- Records an idle processed boundary: the runner decoded no source transaction up to
-- this WAL position. Never while a poison blocks the stream; never backwards. A
-- projection bootstrap staged with its consistent point at or below the boundary is
-- merged here (synchro._bootstrap_catch_up): every transaction before the point is
-- materialized and none after it, so this is the main worker's matching
-- transaction-end boundary even when no source transaction follows the point.
CREATE OR REPLACE FUNCTION synchro.runner_idle(boundary pg_lsn) RETURNS pg_lsn
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Row images render the same whatever the server's defaults (as materialize_batch).
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
-- As in synchro.materialize_batch, whose session this is: a projection bootstrap merged
-- at an idle boundary (synchro._bootstrap_catch_up) probes the pack's tables by index,
-- whatever statistics the session's cached plans were made with.
SET enable_seqscan TO off
-- And no JIT, for the same reason as there: a sequential scan that is the only path
-- carries the disabled scan's cost (1e10), far above jit_above_cost, and every idle
-- boundary then paid for compiling its statements (PostgreSQL 15 with LLVM: the test
-- package took 312–367 s instead of 151 s).
SET jit TO off
AS $$
DECLARE
  result pg_lsn;
  cur    synchro.progress;
BEGIN
  UPDATE synchro.progress p
     SET processed_end_lsn = boundary, updated_at = now()
   WHERE boundary > p.processed_end_lsn
     AND NOT EXISTS (SELECT 1 FROM synchro.quarantine q
                      WHERE q.stream_generation = p.stream_generation AND q.resolved_at IS NULL)
  RETURNING * INTO cur;
  IF FOUND AND EXISTS (SELECT 1 FROM synchro.bootstrap x
                        WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase = 'staged'
                          AND x.stream_generation = cur.stream_generation AND x.consistent_point <= boundary)
     AND NOT EXISTS (SELECT 1 FROM synchro.reset x WHERE x.phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed')) THEN
    -- The work tables of the merge's membership evaluation (this session's, made by
    -- the runner at session start; made here if not).
    PERFORM synchro.runner_stage_open();
    BEGIN
      PERFORM synchro._bootstrap_catch_up(cur.stream_generation, cur.registry_generation, NULL, boundary, false);
    EXCEPTION WHEN SQLSTATE 'SYP08' THEN
      -- An incomplete stage is never merged. Not here: the next source transaction
      -- at or after the point meets it and is quarantined with its identity.
      NULL;
    END;
  END IF;
  SELECT x.processed_end_lsn INTO result FROM synchro.progress x;
  RETURN result;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_idle(pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_idle(pg_lsn) TO synchro_runner;

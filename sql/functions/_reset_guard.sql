-- An open reset blocks the old stream: from the commit of synchro.begin_reset until
-- activation or abort nothing materializes into any stream generation but the
-- reset's target (its catch-up, synchro.runner_reset_materialize). Called first by
-- synchro.materialize_batch; reads the reset under a share lock so that it serializes
-- with begin_reset and abort_reset. SYR01 tells the runner to leave the old stream
-- and serve the reset (the runner treats it as transient: nothing was written).
CREATE OR REPLACE FUNCTION synchro._reset_guard(stream_generation bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  r record;
BEGIN
  SELECT x.phase, x.target_generation INTO r FROM synchro.reset x
   WHERE x.phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed')
     FOR SHARE;
  IF FOUND AND r.target_generation IS DISTINCT FROM _reset_guard.stream_generation THEN
    RAISE EXCEPTION 'reset_in_progress: a stream reset blocks this stream generation (phase %)', r.phase
      USING ERRCODE = 'SYR01';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_guard(bigint) FROM PUBLIC;

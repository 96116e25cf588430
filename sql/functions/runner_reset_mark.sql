-- The coordinator's transactional marker (ADR 001): the runner calls it once per
-- candidate, in its own transaction, when the catch-up starts. The marker transaction's
-- end becomes the activation barrier once the catch-up has materialized it, so the
-- candidate's output always reaches the barrier. It holds push fences out while it
-- takes barrier_snapshot (SHARE lock on write_fence: running pushes finish first, new
-- ones wait for this commit), so a fence is visible in that snapshot exactly when it
-- committed before the barrier; activation checks each such fence's coverage. The
-- message prefix is outside the pack's "synchro." namespace: it is never staged.
--
-- lock_timeout: while the SHARE request waits for a push transaction still open, every
-- later push queues behind it; one idle application transaction stalled every push of
-- the database for as long as it stayed open (TestResetMarkerLetsPushesThrough). The
-- request gives up (55P03) and the runner tries again shortly, letting pushes through
-- in between.
CREATE OR REPLACE FUNCTION synchro.runner_reset_mark(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout TO '500ms'
AS $$
DECLARE
  r synchro.reset;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_mark.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'catching_up' OR r.barrier_xid IS NOT NULL THEN
    RAISE EXCEPTION 'runner_reset_mark: refused in phase % (or marked already)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  LOCK TABLE synchro.write_fence IN SHARE MODE;
  UPDATE synchro.reset x SET barrier_xid = pg_current_xact_id(), barrier_snapshot = pg_current_snapshot()
   WHERE x.reset_id = r.reset_id;
  PERFORM pg_logical_emit_message(true, 'synchro_reset_barrier', r.reset_id::text);
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_mark(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_mark(uuid) TO synchro_runner;

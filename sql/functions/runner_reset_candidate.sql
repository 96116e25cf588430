-- Starts a new candidate for an open reset in phase requested, staging or catching_up:
-- discards whatever an earlier candidate staged (a death in staging lost its exported
-- snapshot; a catch-up whose slot is gone cannot resume), names the new permanent
-- candidate slot and records phase staging before the runner creates the slot, so that
-- a death from here on finds the name and drops that slot. The runner has dropped the
-- earlier candidate's slot before calling.
CREATE OR REPLACE FUNCTION synchro.runner_reset_candidate(reset_id uuid, plugin text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r    synchro.reset;
  slot text;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_candidate.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase NOT IN ('requested', 'staging', 'catching_up') THEN
    RAISE EXCEPTION 'runner_reset_candidate: refused in phase %', coalesce(r.phase, 'unknown') USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro._reset_discard(r.reset_id);
  -- And the earlier candidate's coverage records: the new baseline records every fence
  -- its (later) snapshot holds, which holds all of them. Kept, the new baseline's
  -- records collided with them (23505) on every attempt after a baseline had been
  -- staged, a loop of new candidates (TestResetNewCandidateAfterStagedBaseline).
  DELETE FROM synchro.reset_baseline b WHERE b.reset_id = r.reset_id;
  -- Unique in the cluster (slot names are): attempt and reset id, 42 characters at most.
  slot := format('synchro_r%s_%s', r.attempt + 1, replace(r.reset_id::text, '-', ''));
  UPDATE synchro.reset x
     SET phase = 'staging', attempt = r.attempt + 1, candidate_slot = slot,
         plugin = runner_reset_candidate.plugin, consistent_point = NULL, snapshot_boundary = NULL,
         barrier_xid = NULL, barrier_snapshot = NULL, activation_barrier = NULL, staged_at = NULL, detail = NULL,
         row_digest = NULL, scope_digest = NULL, index_step = NULL, index_rel = NULL, index_pk = NULL,
         verify_rel = NULL, verify_pk = NULL, verify_count = NULL, verify_sum = NULL, verified = false
   WHERE x.reset_id = r.reset_id;
  RETURN slot;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_candidate(uuid, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_candidate(uuid, text) TO synchro_runner;

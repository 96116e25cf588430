-- What the runner needs of resets at each loop: the open reset, else the oldest ended
-- one whose cleanup is still due (an activated reset's old slot and projections, an
-- aborted one's candidate slot). No row when there is nothing to do.
CREATE OR REPLACE FUNCTION synchro.runner_reset_state()
RETURNS TABLE (reset_id uuid, phase text, target_generation bigint, candidate_slot text, retired_slot text,
               consistent_point pg_lsn, barrier_xid xid8, activation_barrier pg_lsn)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT r.reset_id, r.phase, r.target_generation, r.candidate_slot, r.retired_slot, r.consistent_point,
         r.barrier_xid, r.activation_barrier
    FROM synchro.reset r
   WHERE r.phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed')
      OR (r.phase IN ('activated', 'aborted') AND r.cleaned_at IS NULL)
   ORDER BY r.cleaned_at IS NULL AND r.phase IN ('activated', 'aborted') DESC, r.requested_at
   LIMIT 1
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_state() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_state() TO synchro_runner;

-- Phase ready: the catch-up materialized the marker transaction (activation_barrier is
-- set), the candidate slot is acknowledged exactly to the barrier (the runner confirmed
-- it before calling; nothing past the barrier is consumed until activation), and the
-- staged state is verified (synchro.runner_reset_verify recorded its digests, which
-- activation compares).
CREATE OR REPLACE FUNCTION synchro.runner_reset_ready(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.reset;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_ready.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'catching_up' OR r.activation_barrier IS NULL THEN
    RAISE EXCEPTION 'runner_reset_ready: refused in phase % (or no barrier yet)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s
                  WHERE s.slot_name = r.candidate_slot AND NOT s.temporary
                    AND s.confirmed_flush_lsn = r.activation_barrier) THEN
    RAISE EXCEPTION 'runner_reset_ready: refused: the candidate slot is not at the activation barrier' USING ERRCODE = 'SY400';
  END IF;
  IF NOT r.verified THEN
    RAISE EXCEPTION 'runner_reset_ready: refused: the staged state is not verified (synchro.runner_reset_verify)'
      USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.reset x SET phase = 'ready', ready_at = now() WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_ready(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_ready(uuid) TO synchro_runner;

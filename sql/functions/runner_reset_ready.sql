-- Phase ready: the catch-up materialized the marker transaction (activation_barrier is
-- set), the candidate slot is acknowledged exactly to the barrier (the runner confirmed
-- it before calling; nothing past the barrier is consumed until activation), and the
-- staged state is verified; its digests are recorded for activation to compare.
CREATE OR REPLACE FUNCTION synchro.runner_reset_ready(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r        synchro.reset;
  reg      bigint;
  fresh    text;
  rows_d   text;
  scopes_d text;
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
  -- Verification: the membership that the baseline and the catch-up maintained
  -- incrementally equals the membership evaluated afresh from the staged projections
  -- (the same rules, synchro._evaluate_membership, over every staged synced row).
  PERFORM synchro.runner_stage_open();
  PERFORM synchro._reset_swap(true);
  SELECT p.registry_generation INTO STRICT reg FROM synchro.progress p;
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
    JOIN synchro.relation rl ON rl.relation_id = p.relation_id AND rl.registration_kind = 'synced';
  PERFORM synchro._evaluate_membership(reg);
  SELECT count(*) || ':' || coalesce(sum(('x' || left(md5(s.scope || ':' || s.relation_id || ':' || s.pk), 16))::bit(64)::bigint::numeric), 0)
    INTO fresh FROM (SELECT DISTINCT w.scope, w.relation_id, w.pk FROM pg_temp.synchro_w_scopes w) s;
  rows_d := synchro._reset_digest('synchro', 'rows');
  scopes_d := synchro._reset_digest('synchro', 'scopes');
  PERFORM synchro._reset_swap(false);
  PERFORM synchro._stage_reset(true);
  IF fresh IS DISTINCT FROM scopes_d THEN
    RAISE EXCEPTION 'reset verification failed: staged membership differs from its re-evaluation' USING ERRCODE = 'SYR02';
  END IF;
  UPDATE synchro.reset x SET phase = 'ready', ready_at = now(), row_digest = rows_d, scope_digest = scopes_d
   WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_ready(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_ready(uuid) TO synchro_runner;

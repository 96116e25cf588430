-- Verifies a reset's staged state once the catch-up reached the activation barrier,
-- one chunk of at most chunk synced rows per call (the runner commits each; the staged
-- tables stand under the live names for one short transaction at a time): the
-- membership the baseline and the catch-up kept incrementally must equal the membership
-- evaluated afresh from the staged projections by the same rules
-- (synchro._evaluate_membership). The fresh evaluation is summed into an
-- order-independent digest across chunks (durable, so a process death resumes); after
-- the last chunk it is compared with the staged membership's digest (synchro._reset_digest),
-- and the row and scope digests are recorded for activation. SYR02 when they differ.
-- Returns true when verified.
CREATE OR REPLACE FUNCTION synchro.runner_reset_verify(reset_id uuid, chunk int) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r      synchro.reset;
  reg    bigint;
  n      bigint;
  c      bigint;
  s      numeric;
  lrel   bigint;
  lpk    text;
  staged text;
BEGIN
  IF chunk IS NULL OR chunk < 1 OR chunk > 1000000 THEN
    RAISE EXCEPTION 'runner_reset_verify: chunk must be 1 to 1000000' USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_verify.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'catching_up' OR r.activation_barrier IS NULL THEN
    RAISE EXCEPTION 'runner_reset_verify: refused in phase % (or no barrier yet)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  IF r.verified THEN
    RETURN true;
  END IF;
  PERFORM synchro.runner_stage_open();
  PERFORM synchro._reset_swap(true);
  SELECT p.registry_generation INTO STRICT reg FROM synchro.progress p;
  DELETE FROM pg_temp.synchro_w_impacted;
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
    JOIN synchro.relation rl ON rl.relation_id = p.relation_id AND rl.registration_kind = 'synced'
   WHERE r.verify_rel IS NULL OR (p.relation_id, p.pk) > (r.verify_rel, r.verify_pk)
   ORDER BY p.relation_id, p.pk LIMIT chunk;
  SELECT count(*) INTO n FROM pg_temp.synchro_w_impacted;
  SELECT i.relation_id, i.pk INTO lrel, lpk FROM pg_temp.synchro_w_impacted i ORDER BY i.relation_id DESC, i.pk DESC LIMIT 1;
  PERFORM synchro._evaluate_membership(reg);
  SELECT count(*), coalesce(sum(('x' || left(md5(w.scope || ':' || w.relation_id || ':' || w.pk), 16))::bit(64)::bigint::numeric), 0)
    INTO c, s FROM (SELECT DISTINCT w0.scope, w0.relation_id, w0.pk FROM pg_temp.synchro_w_scopes w0) w;
  PERFORM synchro._reset_swap(false);
  PERFORM synchro._stage_reset(NULL);

  c := coalesce(r.verify_count, 0) + c;
  s := coalesce(r.verify_sum, 0) + s;
  IF n = chunk THEN
    UPDATE synchro.reset x SET verify_rel = lrel, verify_pk = lpk, verify_count = c, verify_sum = s
     WHERE x.reset_id = r.reset_id;
    RETURN false;
  END IF;
  staged := synchro._reset_digest('synchro_reset', 'scopes');
  IF staged IS DISTINCT FROM c || ':' || s THEN
    RAISE EXCEPTION 'reset verification failed: staged membership differs from its re-evaluation' USING ERRCODE = 'SYR02';
  END IF;
  UPDATE synchro.reset x
     SET verified = true, verify_count = c, verify_sum = s, scope_digest = staged,
         row_digest = synchro._reset_digest('synchro_reset', 'rows')
   WHERE x.reset_id = r.reset_id;
  RETURN true;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_verify(uuid, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_verify(uuid, int) TO synchro_runner;

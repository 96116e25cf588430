-- Indexes a reset's staged baseline rows, one chunk of at most chunk rows per call (the
-- runner commits each): their rule values first, then their membership, by the first
-- start's code (synchro._baseline_index) run on the staged tables (synchro._reset_swap
-- holds the live names for this one short transaction). The keyset position is durable,
-- so a process death resumes here. Returns true when the last chunk is done: phase
-- catching_up.
CREATE OR REPLACE FUNCTION synchro.runner_reset_index(reset_id uuid, chunk int) RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r   synchro.reset;
  reg bigint;
  res record;
BEGIN
  IF chunk IS NULL OR chunk < 1 OR chunk > 1000000 THEN
    RAISE EXCEPTION 'runner_reset_index: chunk must be 1 to 1000000' USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = runner_reset_index.reset_id FOR UPDATE;
  IF NOT FOUND OR r.phase <> 'staging' OR r.index_step IS NULL THEN
    RAISE EXCEPTION 'runner_reset_index: refused in phase % (or nothing staged)', coalesce(r.phase, 'unknown')
      USING ERRCODE = 'SY400';
  END IF;
  PERFORM synchro.runner_stage_open();
  PERFORM synchro._reset_swap(true);
  SELECT p.registry_generation INTO STRICT reg FROM synchro.progress p;
  res := synchro._baseline_index(reg, r.index_step, r.index_rel, r.index_pk, chunk);
  PERFORM synchro._reset_swap(false);
  PERFORM synchro._stage_reset(NULL);
  IF res.n = chunk THEN
    UPDATE synchro.reset x SET index_rel = res.last_rel, index_pk = res.last_pk WHERE x.reset_id = r.reset_id;
    RETURN false;
  ELSIF r.index_step = 'rules' THEN
    UPDATE synchro.reset x SET index_step = 'scopes', index_rel = NULL, index_pk = NULL WHERE x.reset_id = r.reset_id;
    RETURN false;
  END IF;
  UPDATE synchro.reset x SET phase = 'catching_up', index_step = NULL, index_rel = NULL, index_pk = NULL,
         staged_at = now()
   WHERE x.reset_id = r.reset_id;
  RETURN true;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_index(uuid, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_index(uuid, int) TO synchro_runner;

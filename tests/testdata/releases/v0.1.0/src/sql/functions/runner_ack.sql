-- Records that the slot was acknowledged up to lsn. Only after the slot reached it,
-- and never beyond the processed boundary (a table constraint enforces that too).
CREATE OR REPLACE FUNCTION synchro.runner_ack(lsn pg_lsn) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p synchro.progress;
BEGIN
  SELECT * INTO STRICT p FROM synchro.progress FOR UPDATE;
  IF lsn > p.processed_end_lsn OR lsn < p.generation_start_lsn THEN
    RAISE EXCEPTION 'acknowledgement refused: outside [generation_start, processed boundary]' USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.progress SET acknowledged_end_lsn = lsn, updated_at = now();
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_ack(pg_lsn) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_ack(pg_lsn) TO synchro_runner;

-- Operator: asks the runner to retry the blocked source transaction with the same
-- replay identities (after the cause was repaired). Nothing is skipped or rewritten.
--
-- Each request is counted (retry_seq): an attempt that fails records which request it
-- served (synchro.runner_poison), and a request made while it ran stays asked for. With
-- only the flag, the failed attempt cleared it, and a retry asked for after the repair
-- was lost: the stream stayed blocked (TestRetryRequestDuringFailingAttempt).
CREATE OR REPLACE FUNCTION synchro.retry_poison() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  UPDATE synchro.quarantine SET retry_requested = true, retry_seq = retry_seq + 1 WHERE resolved_at IS NULL;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'retry_poison: no blocking poison exists' USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro.retry_poison() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.retry_poison() TO synchro_operator;

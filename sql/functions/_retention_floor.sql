-- How far compaction may delete in the stream generation gen, for a compaction whose
-- age cutoff is cutoff (docs/retention.md). The one place that decides it: a rule that
-- must hold back deletion (consumer groups: never past the slowest group's checkpoint)
-- caps the two results here.
--
-- effect_horizon: the commit LSN of the newest transaction that, with every transaction
--   before it, was materialized before cutoff. Pull effects at or below it may go and
--   it becomes the retention horizon (cursors below it: SY409). Materialization is
--   serial, so materialized_at rises with commit_lsn; the scan stops at the first
--   transaction at or after cutoff, so it reads only the transactions old enough
--   (those at or below the floor are gone already), and a clock that stepped back
--   makes it keep more, never less. NULL: nothing is old enough.
-- ledger_floor: the replay ledgers (synchro.txn, synchro.event, with the covered write
--   fences and the deletion reservations their events carry) at or below it may go:
--   at or below the effect horizon (compact(keep) reads materialized_at from the
--   ledger), and only transactions whose end the slot was acknowledged past: the slot
--   never sends those again (decoding resumes at the acknowledgement; the runner
--   advances a slot that lags it before reading), so no replay can need their
--   identities. NULL: nothing may go.
CREATE OR REPLACE FUNCTION synchro._retention_floor(
  gen bigint, cutoff timestamptz, OUT effect_horizon pg_lsn, OUT ledger_floor pg_lsn)
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  young pg_lsn;
  ack   pg_lsn;
BEGIN
  SELECT t.commit_lsn INTO young FROM synchro.txn t
   WHERE t.stream_generation = gen AND t.materialized_at >= cutoff
   ORDER BY t.commit_lsn LIMIT 1;
  SELECT max(t.commit_lsn) INTO effect_horizon FROM synchro.txn t
   WHERE t.stream_generation = gen AND (young IS NULL OR t.commit_lsn < young);

  SELECT coalesce(p.acknowledged_end_lsn, p.generation_start_lsn) INTO ack
    FROM synchro.progress p WHERE p.stream_generation = gen;
  IF effect_horizon IS NULL OR ack IS NULL THEN
    RETURN; -- ledger_floor NULL: not the active generation, or nothing old enough
  END IF;
  SELECT max(t.commit_lsn) INTO ledger_floor FROM synchro.txn t
   WHERE t.stream_generation = gen AND t.commit_lsn <= effect_horizon AND t.end_lsn <= ack;
END
$$;

REVOKE ALL ON FUNCTION synchro._retention_floor(bigint, timestamptz) FROM PUBLIC;

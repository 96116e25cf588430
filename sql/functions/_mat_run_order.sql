-- A phase of the set-based run: the run's new transactions (pg_temp.synchro_b_txn)
-- follow the durable stream in serial commit order, each after the high-watermark and
-- the processed boundary left by the ones before it. Else SYB01: the runner re-runs
-- the batch one transaction at a time, and the reference path names the failure.
-- Called by synchro._mat_run_position, and again by synchro.materialize_write with the
-- positions the batch before left (a prepared batch was positioned before it committed).
CREATE OR REPLACE FUNCTION synchro._mat_run_order(hw_commit_lsn pg_lsn, start_lsn pg_lsn, processed_lsn pg_lsn)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from the set-based run, under its pinned search_path.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  IF EXISTS (
    SELECT 1 FROM (
      SELECT b.commit_lsn, b.end_lsn,
             coalesce(lag(b.commit_lsn) OVER w, hw_commit_lsn, start_lsn) AS prev_commit,
             greatest(processed_lsn, max(b.end_lsn) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
               AS prev_end
        FROM pg_temp.synchro_b_txn b
      WINDOW w AS (ORDER BY b.t)) x
     WHERE x.commit_lsn <= x.prev_commit OR x.commit_lsn < x.prev_end OR x.end_lsn <= x.commit_lsn) THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'commit order';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_order(pg_lsn, pg_lsn, pg_lsn) FROM PUBLIC;

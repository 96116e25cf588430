-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- check the stream position. It fills pg_temp.synchro_b_txn with the run's new
-- transactions and checks that they follow the durable stream in serial commit order.
--
-- The progress row's three positions come as scalars, not as a synchro.progress row: a
-- stream reset's catch-up runs this with the staged tables swapped in under the same
-- names (synchro._reset_swap), and a parameter of the table's row type would be bound
-- to whichever synchro.progress the session saw first (42883 for the other).
CREATE OR REPLACE FUNCTION synchro._mat_run_position(
  t_first int, t_last int, gen bigint, hw_commit_lsn pg_lsn, start_lsn pg_lsn, processed_lsn pg_lsn,
  commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[], commit_times timestamptz[],
  OUT n_new int, OUT n_ev bigint, OUT n_fence int)
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- The run's transactions, less those already durable (a replay after a crash:
  -- same result, nothing new), each with its row events and fences counted in one scan
  -- of the stage. The ledger is probed once per transaction of the run (OFFSET 0 keeps
  -- the probe a per-row index lookup: planned as an anti join, it read every ledger
  -- row of the stream generation for each transaction, so its cost grew with the
  -- ledger).
  WITH c AS (
    SELECT s.txn, count(*) FILTER (WHERE s.kind IN ('I', 'U', 'D', 'T'))::int AS n,
           count(*) FILTER (WHERE s.kind = 'M' AND s.prefix = 'synchro.fence')::int AS f
      FROM pg_temp.synchro_stage s
     WHERE s.txn BETWEEN t_first AND t_last
     GROUP BY s.txn),
  ins AS (
    INSERT INTO pg_temp.synchro_b_txn (t, commit_lsn, end_lsn, xid, commit_time, n_events, n_fences)
    SELECT x.i::int - 1, x.c, x.e, x.x, x.ct, coalesce(c.n, 0), coalesce(c.f, 0)
      FROM unnest(commit_lsns, end_lsns, xids, commit_times) WITH ORDINALITY AS x(c, e, x, ct, i)
      LEFT JOIN c ON c.txn = x.i - 1
     WHERE x.i - 1 BETWEEN t_first AND t_last
       AND NOT EXISTS (SELECT 1 FROM synchro.txn d WHERE d.stream_generation = gen AND d.commit_lsn = x.c OFFSET 0)
    RETURNING n_events, n_fences)
  SELECT count(*), coalesce(sum(ins.n_events), 0), coalesce(sum(ins.n_fences), 0) INTO n_new, n_ev, n_fence FROM ins;
  IF n_new = 0 THEN
    RETURN; -- every transaction of the run is durable already
  END IF;

  PERFORM synchro._mat_run_order(hw_commit_lsn, start_lsn, processed_lsn);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_position(int, int, bigint, pg_lsn, pg_lsn, pg_lsn, pg_lsn[], pg_lsn[], bigint[],
                                                 timestamptz[]) FROM PUBLIC;

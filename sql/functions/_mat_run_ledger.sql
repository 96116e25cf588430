-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- write the ledger. Write-fence reconciliation, the replay identities of the run's
-- transactions and events, and the transaction-end high-watermark.
CREATE OR REPLACE FUNCTION synchro._mat_run_ledger(gen bigint, reg bigint)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- Write-fence reconciliation: exactly these fences are now WAL-materialized.
  UPDATE synchro.write_fence wf SET coverage = 'wal', covered_at = now()
   WHERE wf.fence_id = ANY (ARRAY(SELECT w.fence_id FROM pg_temp.synchro_b_rows w)) AND wf.coverage IS NULL;

  -- Replay identities and the transaction-end high-watermark.
  INSERT INTO synchro.txn (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count)
  SELECT gen, b.commit_lsn, b.end_lsn, b.xid, b.commit_time, b.n_events FROM pg_temp.synchro_b_txn b;
  INSERT INTO synchro.event (stream_generation, commit_lsn, event_ordinal, relation_id, op, pk, version, fence_id,
                             registry_generation)
  SELECT gen, b.commit_lsn, w.event_ordinal, w.relation_id, w.op, w.pk, w.version, w.fence_id, reg
    FROM pg_temp.synchro_b_rows w JOIN pg_temp.synchro_b_txn b ON b.t = w.t;
  UPDATE synchro.progress
     SET materialized_commit_lsn = (SELECT b.commit_lsn FROM pg_temp.synchro_b_txn b ORDER BY b.t DESC LIMIT 1),
         processed_end_lsn = greatest(processed_end_lsn, (SELECT max(b.end_lsn) FROM pg_temp.synchro_b_txn b)),
         updated_at = now();
  UPDATE synchro.quarantine q SET resolved_at = now(), retry_requested = false
   WHERE q.stream_generation = gen AND q.resolved_at IS NULL
     AND q.commit_lsn = ANY (ARRAY(SELECT b.commit_lsn FROM pg_temp.synchro_b_txn b));
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_ledger(bigint, bigint) FROM PUBLIC;

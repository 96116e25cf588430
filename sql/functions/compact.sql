-- Operator: one bounded batch of compaction (docs/sql/compact.md, docs/retention.md).
-- Moves the retention horizon to the newest source transaction materialized longer
-- than `keep` ago (recorded first: cursors below it get SY409; rebuild and push
-- outcomes are unaffected) and deletes, at most compact_batch_rows rows in all (a
-- setting), in this order:
--   1. pull effects at or below the horizon, and of retired stream generations;
--   2. replay ledger events at or below the ledger floor (synchro._retention_floor: the
--      horizon, capped by the slot's acknowledgement), with the write fences they
--      covered and the deletion reservations (row_version tombstones) they left;
--   3. replay ledger transactions at or below the ledger floor;
--   4. resolved quarantine records at or below the ledger floor;
--   5. push outcomes older than outcome_retention, when the operator set one (by default
--      'never': the contract keeps a client's outcomes as long as the client exists);
--   6. outcomes and fences a push racing synchro.retire_client wrote;
--   7. retired client ids older than retired_client_retention (a setting).
-- It returns "done": false when the budget ran out: call it again, each call in its own
-- transaction, so a long compaction never holds one transaction or its locks
-- (synchro.compact_all is that loop). Whole source transactions go at once, so the
-- horizon is a transaction_end position.
CREATE OR REPLACE FUNCTION synchro.compact(keep interval) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET "IntervalStyle" TO 'postgres'
AS $$
DECLARE
  gen      bigint;
  retired  bigint[];
  cutoff   timestamptz;
  eff_h    pg_lsn; -- synchro._retention_floor's effect horizon
  led_f    pg_lsn; -- and its ledger floor
  horizon  pg_lsn;
  budget   int;
  lim      int;
  n        bigint;
  nf       bigint;
  nr       bigint;
  keep_out interval;
  keep_ret interval;
  d_effects bigint := 0;
  d_events  bigint := 0;
  d_fences  bigint := 0;
  d_tombs   bigint := 0;
  d_txns    bigint := 0;
  d_quar    bigint := 0;
  d_outs    bigint := 0;
  d_retired bigint := 0;
  changes   bigint := 0; -- consumer groups' change record (issue 11)
BEGIN
  IF keep IS NULL OR keep < interval '0' THEN
    RAISE EXCEPTION 'compact refused: keep must be a non-negative interval' USING ERRCODE = 'SY400';
  END IF;
  -- READ COMMITTED only: the consumer-group floor (synchro._consumer_floor) is read
  -- after its lock, which a group being created at `earliest` holds, and only a
  -- statement snapshot taken after that wait sees the new group. A transaction
  -- snapshot is older: compaction deleted the new group's unacknowledged changes
  -- (TestConsumerGroupCompactRefusedOutsideReadCommitted).
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'compact refused: it must run at READ COMMITTED (the consumer-group floor is read after its lock)'
      USING ERRCODE = 'SY400';
  END IF;
  -- One compaction at a time: two would only wait on each other's rows. Transaction
  -- scoped, so it is released with each batch.
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.compact', synchro._lock_seed()));
  SELECT CASE WHEN s.value ~ '^[0-9]{1,7}$' THEN s.value::int END INTO budget
    FROM synchro.setting s WHERE s.name = 'compact_batch_rows';
  budget := coalesce(budget, 10000);
  lim := budget;
  -- An enormous keep (beyond the range of timestamptz) keeps everything: nothing was
  -- materialized that long ago.
  BEGIN
    cutoff := now() - keep;
  EXCEPTION WHEN datetime_field_overflow THEN
    cutoff := '-infinity';
  END;

  SELECT p.stream_generation INTO gen FROM synchro.progress p;
  retired := ARRAY(SELECT g.stream_generation FROM synchro.stream_generation g WHERE g.state = 'retired');
  IF gen IS NOT NULL THEN
    SELECT f.effect_horizon, f.ledger_floor INTO eff_h, led_f FROM synchro._retention_floor(gen, cutoff) f;
    -- The horizon first: from here on, cursors below it are stale. It never moves
    -- back (a longer keep than last time changes nothing).
    IF eff_h IS NOT NULL THEN
      INSERT INTO synchro.retention AS r (stream_generation, horizon_commit_lsn)
      VALUES (gen, eff_h)
      ON CONFLICT (stream_generation) DO UPDATE
        SET horizon_commit_lsn = excluded.horizon_commit_lsn, updated_at = now()
        WHERE r.horizon_commit_lsn < excluded.horizon_commit_lsn;
    END IF;
    SELECT r.horizon_commit_lsn INTO horizon FROM synchro.retention r WHERE r.stream_generation = gen;
    -- Consumer groups (issue 11): the change record up to the same horizon, never past
    -- a group's unacknowledged change (synchro._consumer_floor inside), in this batch's
    -- transaction with the floor it read.
    -- Within this call's budget, like everything below.
    IF horizon IS NOT NULL THEN
      changes := synchro._consumer_compact(gen, horizon, lim);
      lim := lim - changes;
    END IF;

    -- 1. Pull effects at or below the horizon.
    IF horizon IS NOT NULL THEN
      DELETE FROM synchro.effect e
       WHERE e.ctid = ANY (ARRAY(
         SELECT x.ctid FROM synchro.effect x
          WHERE x.stream_generation = gen AND x.commit_lsn <= horizon LIMIT lim));
      GET DIAGNOSTICS n = ROW_COUNT;
      d_effects := d_effects + n;
      lim := lim - n;
    END IF;
  END IF;
  -- Effects of retired stream generations are never pulled again.
  IF lim > 0 AND cardinality(retired) > 0 THEN
    DELETE FROM synchro.effect e
     WHERE e.ctid = ANY (ARRAY(SELECT x.ctid FROM synchro.effect x WHERE x.stream_generation = ANY (retired) LIMIT lim));
    GET DIAGNOSTICS n = ROW_COUNT;
    d_effects := d_effects + n;
    lim := lim - n;
  END IF;

  -- 2. Replay ledger events at or below the ledger floor (or of a retired generation),
  -- with what each one settled: the push write fence it covered (a covered fence gates
  -- nothing any more) and, for a deletion, the row's reservation when it still holds
  -- that deletion's version (a key inserted again since has a new version and keeps
  -- its reservation). A reservation some transaction has locked right now is skipped,
  -- never waited for: that transaction is inserting the key again. Fence-id
  -- uniqueness is checked against the retained ledger only: docs/retention.md says
  -- why that is enough.
  IF lim > 0 AND (led_f IS NOT NULL OR cardinality(retired) > 0) THEN
    WITH ev AS (
      DELETE FROM synchro.event e
       WHERE e.ctid = ANY (ARRAY(
         SELECT x.ctid FROM synchro.event x
          WHERE (x.stream_generation = gen AND x.commit_lsn <= led_f) OR x.stream_generation = ANY (retired)
          LIMIT lim))
      RETURNING e.fence_id, e.op, e.relation_id, e.pk, e.version),
    wf AS (
      DELETE FROM synchro.write_fence w
       USING ev WHERE w.fence_id = ev.fence_id AND w.coverage IS NOT NULL
      RETURNING 1),
    rv AS (
      DELETE FROM synchro.row_version r
       WHERE r.ctid = ANY (ARRAY(
         SELECT v.ctid FROM synchro.row_version v JOIN ev
             ON ev.op = 'delete' AND v.relation_id = ev.relation_id AND v.pk = ev.pk AND v.version = ev.version
          WHERE v.deleted
            FOR UPDATE OF v SKIP LOCKED))
         AND r.deleted
      RETURNING 1)
    SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM wf), (SELECT count(*) FROM rv) INTO n, nf, nr;
    d_events := d_events + n;
    d_fences := d_fences + nf;
    d_tombs := d_tombs + nr;
    lim := lim - n;
  END IF;

  -- 3. Replay ledger transactions at or below the ledger floor (or of a retired
  -- generation): materialization asks only whether the identity of a transaction it
  -- is sent exists, and no transaction at or below the floor is ever sent again.
  IF lim > 0 AND (led_f IS NOT NULL OR cardinality(retired) > 0) THEN
    DELETE FROM synchro.txn t
     WHERE t.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.txn x
        WHERE (x.stream_generation = gen AND x.commit_lsn <= led_f) OR x.stream_generation = ANY (retired)
        LIMIT lim));
    GET DIAGNOSTICS n = ROW_COUNT;
    d_txns := d_txns + n;
    lim := lim - n;
  END IF;

  -- 4. Resolved quarantine records of transactions at or below the ledger floor (or of
  -- a retired generation). An unresolved one blocks the stream and always stays.
  IF lim > 0 AND (led_f IS NOT NULL OR cardinality(retired) > 0) THEN
    DELETE FROM synchro.quarantine q
     WHERE q.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.quarantine x
        WHERE x.resolved_at IS NOT NULL
          AND ((x.stream_generation = gen AND x.commit_lsn <= led_f) OR x.stream_generation = ANY (retired))
        LIMIT lim));
    GET DIAGNOSTICS n = ROW_COUNT;
    d_quar := d_quar + n;
    lim := lim - n;
  END IF;

  -- 5. Push outcomes older than the operator's age limit, oldest first. 'never' (the
  -- default), a missing or an unreadable setting keeps them all.
  keep_out := synchro._setting_interval('outcome_retention');
  IF lim > 0 AND keep_out IS NOT NULL THEN
    BEGIN
      DELETE FROM synchro.mutation_outcome o
       WHERE o.ctid = ANY (ARRAY(
         SELECT x.ctid FROM synchro.mutation_outcome x
          WHERE x.decided_at < now() - keep_out ORDER BY x.decided_at LIMIT lim));
      GET DIAGNOSTICS n = ROW_COUNT;
    EXCEPTION WHEN datetime_field_overflow THEN
      n := 0; -- a limit beyond the range of timestamptz: nothing is that old
    END;
    d_outs := d_outs + n;
    lim := lim - n;
  END IF;

  -- 6. A push whose snapshot predates a retire_client it raced (REPEATABLE READ or
  -- SERIALIZABLE callers) may still have recorded outcomes and fences for the retired
  -- client after retire_client deleted them: they go here.
  IF lim > 0 AND EXISTS (SELECT 1 FROM synchro.retired_client) THEN
    DELETE FROM synchro.mutation_outcome o
     WHERE o.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.retired_client rc JOIN synchro.mutation_outcome x ON x.client_id = rc.client_id
        LIMIT lim));
    GET DIAGNOSTICS n = ROW_COUNT;
    d_outs := d_outs + n;
    lim := lim - n;
  END IF;
  IF lim > 0 AND EXISTS (SELECT 1 FROM synchro.retired_client) THEN
    DELETE FROM synchro.write_fence w
     WHERE w.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.retired_client rc JOIN synchro.write_fence x ON x.client_id = rc.client_id
        LIMIT lim));
    GET DIAGNOSTICS n = ROW_COUNT;
    d_fences := d_fences + n;
    lim := lim - n;
  END IF;

  -- 7. Retired client ids older than their retention: the id is accepted again.
  keep_ret := synchro._setting_interval('retired_client_retention');
  IF lim > 0 AND keep_ret IS NOT NULL THEN
    BEGIN
      DELETE FROM synchro.retired_client c
       WHERE c.ctid = ANY (ARRAY(
         SELECT x.ctid FROM synchro.retired_client x
          WHERE x.retired_at < now() - keep_ret ORDER BY x.retired_at LIMIT lim));
      GET DIAGNOSTICS n = ROW_COUNT;
    EXCEPTION WHEN datetime_field_overflow THEN
      n := 0;
    END;
    d_retired := d_retired + n;
    lim := lim - n;
  END IF;

  RETURN jsonb_build_object(
    'horizon', horizon,
    'batches', CASE WHEN lim < budget OR d_fences + d_tombs > 0 THEN 1 ELSE 0 END,
    'done', lim > 0,
    'deleted_effects', d_effects,
    'deleted_events', d_events,
    'deleted_transactions', d_txns,
    'deleted_write_fences', d_fences,
    'deleted_reservations', d_tombs,
    'deleted_quarantine', d_quar,
    'deleted_outcomes', d_outs,
    'deleted_retired_clients', d_retired,
    'deleted_changes', changes);
END
$$;

REVOKE ALL ON FUNCTION synchro.compact(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.compact(interval) TO synchro_operator;

-- The change record's part of synchro.compact: deletes the changes of stream
-- generation gen up to `horizon` (compact's), but never past a consumer group's
-- unacknowledged change (synchro._consumer_floor), records how far it got (the change
-- record's horizon, never moved back; groups created at `earliest` start there), and
-- deletes the changes of retired generations: at most lim rows in all, compact's
-- budget (it looped to the end before, so one compact call after a release deleted a
-- whole backlog in one transaction: TestCompactChangeRecordWithinBudget). Returns the
-- number of changes deleted; the caller calls again, in a new transaction, while its
-- budget runs out.
CREATE OR REPLACE FUNCTION synchro._consumer_compact(gen bigint, horizon pg_lsn, lim int) RETURNS bigint
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from synchro.compact, which pinned
-- search_path.
AS $$
DECLARE
  floor_  pg_lsn;
  h       pg_lsn;
  deleted bigint := 0;
  n       bigint;
BEGIN
  -- A group being created holds the floor lock exclusively until its transaction ends,
  -- and any consumer can leave that transaction open: compaction does not wait for it
  -- (it waited for ever, and held back every other kind of retention with it). It
  -- leaves the change record for the next call: deleting nothing is always safe.
  -- TestConsumerGroupCompactRefusedOutsideReadCommitted.
  IF NOT pg_try_advisory_xact_lock_shared(synchro._consumer_lock_key()) THEN
    RETURN 0;
  END IF;
  floor_ := synchro._consumer_floor(gen);
  h := CASE WHEN floor_ IS NULL THEN horizon ELSE least(horizon, floor_) END;
  IF h IS NOT NULL THEN
    INSERT INTO synchro.change_retention AS r (stream_generation, horizon_commit_lsn)
    VALUES (gen, h)
    ON CONFLICT (stream_generation) DO UPDATE
      SET horizon_commit_lsn = greatest(r.horizon_commit_lsn, excluded.horizon_commit_lsn), updated_at = now()
    RETURNING r.horizon_commit_lsn INTO h;
    -- Never past the floor, even below the recorded horizon: a group positioned below
    -- it (none should be: groups created at `earliest` start at the horizon) keeps what
    -- it has not acknowledged rather than read a gap.
    IF floor_ IS NOT NULL AND floor_ < h THEN
      h := floor_;
    END IF;
    IF lim > 0 THEN
      DELETE FROM synchro.change c
       WHERE c.ctid = ANY (ARRAY(
         SELECT x.ctid FROM synchro.change x
          WHERE x.stream_generation = gen AND x.commit_lsn <= h
          LIMIT lim));
      GET DIAGNOSTICS n = ROW_COUNT;
      deleted := deleted + n;
    END IF;
  END IF;
  -- Changes of retired stream generations are never read again (their groups read
  -- SY409). Retired ones only, read now, not "every generation but gen": a reset
  -- activated since the caller read gen makes gen retired and a new generation active,
  -- whose changes its groups have not acknowledged
  -- (TestConsumerGroupCompactAcrossResetActivation, found by review 2026-12-05).
  IF lim - deleted > 0 THEN
    DELETE FROM synchro.change c
     WHERE c.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.change x
        WHERE x.stream_generation IN (SELECT g.stream_generation FROM synchro.stream_generation g WHERE g.state = 'retired')
        LIMIT lim - deleted));
    GET DIAGNOSTICS n = ROW_COUNT;
    deleted := deleted + n;
  END IF;
  RETURN deleted;
END
$$;

REVOKE ALL ON FUNCTION synchro._consumer_compact(bigint, pg_lsn, int) FROM PUBLIC;

-- Operator: deletes pull effects of source transactions materialized longer than
-- `keep` ago, in bounded batches, and records the retention horizon. Cursors below the
-- horizon get SY409 (rebuild); rebuild and push outcomes are unaffected. Whole source
-- transactions go at once, so the horizon is a transaction_end position.
CREATE OR REPLACE FUNCTION synchro.compact(keep interval) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  gen      bigint;
  horizon  pg_lsn;
  batch    int;
  deleted  bigint := 0;
  batches  int := 0;
  cutoff   timestamptz;
  changes  bigint := 0; -- consumer groups' change record (issue 11)
BEGIN
  IF keep IS NULL OR keep < interval '0' THEN
    RAISE EXCEPTION 'compact refused: keep must be a non-negative interval' USING ERRCODE = 'SY400';
  END IF;
  SELECT p.stream_generation INTO gen FROM synchro.progress p;
  IF gen IS NULL THEN
    RETURN jsonb_build_object('deleted_effects', 0, 'batches', 0, 'horizon', NULL, 'deleted_changes', 0);
  END IF;
  -- An enormous keep (beyond the range of timestamptz) keeps everything: nothing was
  -- materialized that long ago.
  BEGIN
    cutoff := now() - keep;
  EXCEPTION WHEN datetime_field_overflow THEN
    cutoff := '-infinity';
  END;
  SELECT max(t.commit_lsn) INTO horizon FROM synchro.txn t
   WHERE t.stream_generation = gen AND t.materialized_at < cutoff;
  IF horizon IS NULL THEN
    SELECT r.horizon_commit_lsn INTO horizon FROM synchro.retention r WHERE r.stream_generation = gen;
    RETURN jsonb_build_object('deleted_effects', 0, 'batches', 0, 'horizon', horizon, 'deleted_changes', 0);
  END IF;
  -- The horizon first: from here on, cursors below it are stale.
  INSERT INTO synchro.retention AS r (stream_generation, horizon_commit_lsn)
  VALUES (gen, horizon)
  ON CONFLICT (stream_generation) DO UPDATE
    SET horizon_commit_lsn = greatest(r.horizon_commit_lsn, excluded.horizon_commit_lsn), updated_at = now()
  RETURNING r.horizon_commit_lsn INTO horizon; -- a longer keep never moves it back
  LOOP
    DELETE FROM synchro.effect e
     WHERE e.ctid = ANY (ARRAY(
       SELECT x.ctid FROM synchro.effect x
        WHERE x.stream_generation = gen AND x.commit_lsn <= horizon
        LIMIT 10000));
    GET DIAGNOSTICS batch = ROW_COUNT;
    EXIT WHEN batch = 0;
    deleted := deleted + batch;
    batches := batches + 1;
  END LOOP;
  -- Effects of retired stream generations are never pulled again.
  LOOP
    DELETE FROM synchro.effect e
     WHERE e.ctid = ANY (ARRAY(SELECT x.ctid FROM synchro.effect x WHERE x.stream_generation <> gen LIMIT 10000));
    GET DIAGNOSTICS batch = ROW_COUNT;
    EXIT WHEN batch = 0;
    deleted := deleted + batch;
    batches := batches + 1;
  END LOOP;
  -- Consumer groups (issue 11): the change record up to the same horizon, never past a
  -- group's unacknowledged change (synchro._consumer_floor inside).
  changes := synchro._consumer_compact(gen, horizon);
  RETURN jsonb_build_object('deleted_effects', deleted, 'batches', batches, 'horizon', horizon,
                            'deleted_changes', changes);
END
$$;

REVOKE ALL ON FUNCTION synchro.compact(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.compact(interval) TO synchro_operator;

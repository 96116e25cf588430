-- Waits until every source transaction of xids (32-bit ids from pgoutput Begin
-- messages) is visible to new snapshots of this session (see synchro._await_visible
-- for why): one snapshot checks them all, and only a miss sleeps and checks again.
CREATE OR REPLACE FUNCTION synchro._await_visible_all(xids bigint[]) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  snap pg_snapshot;
  xmin bigint;
  xmax bigint;
  tries int := 0;
BEGIN
  LOOP
    -- One snapshot for the whole check, in bigint arithmetic: a transaction whose
    -- 64-bit id lies below the snapshot's xmin is visible (it committed: it was
    -- decoded), and only the few at or above it need pg_visible_in_snapshot. Taken per
    -- xid, with numeric arithmetic, the check cost ~10 µs per source transaction.
    snap := pg_current_snapshot();
    xmin := pg_snapshot_xmin(snap)::text::bigint;
    xmax := pg_snapshot_xmax(snap)::text::bigint;
    EXIT WHEN NOT EXISTS (
      SELECT 1
        FROM (SELECT x.xid, synchro._xid_nearest(x.xid, xmax) AS full
                FROM unnest(xids) AS x(xid)
               WHERE x.xid >= 3) f
       WHERE f.full >= xmin
         AND NOT pg_visible_in_snapshot(f.full::text::xid8, snap));
    tries := tries + 1;
    IF tries > 10000 THEN
      -- Retryable: the runner backs off and tries the same transactions again.
      RAISE EXCEPTION 'source transaction not visible yet' USING ERRCODE = 'serialization_failure';
    END IF;
    PERFORM pg_sleep(0.001);
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._await_visible_all(bigint[]) FROM PUBLIC;

-- Waits until every source transaction of xids (32-bit ids from pgoutput Begin
-- messages) is visible to new snapshots of this session (see synchro._await_visible
-- for why): one snapshot checks them all, and only a miss sleeps and checks again.
CREATE OR REPLACE FUNCTION synchro._await_visible_all(xids bigint[]) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  snap_xmax numeric;
  tries     int := 0;
BEGIN
  LOOP
    snap_xmax := pg_snapshot_xmax(pg_current_snapshot())::text::numeric;
    EXIT WHEN NOT EXISTS (
      SELECT 1 FROM unnest(xids) AS x(xid)
       WHERE x.xid >= 3 AND NOT pg_visible_in_snapshot(synchro._full_xid(x.xid, snap_xmax), pg_current_snapshot()));
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

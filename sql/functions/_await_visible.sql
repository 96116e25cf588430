-- Waits until the source transaction is visible to new snapshots of this session.
--
-- Logical decoding hands a transaction over once its commit record is in the WAL,
-- which is before the committing backend leaves the proc array: for a moment a new
-- snapshot still sees it as running. Materialization reads a little live state that
-- the source transaction wrote (its push write fences, a registry generation it
-- activated), so it must not start inside that window. xid is the 32-bit id from the
-- pgoutput Begin message, widened to 64 bits next to the current snapshot's xmax.
CREATE OR REPLACE FUNCTION synchro._await_visible(xid bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  xmax numeric := pg_snapshot_xmax(pg_current_snapshot())::text::numeric;
  full_xid xid8;
  tries int := 0;
BEGIN
  IF xid IS NULL OR xid < 3 THEN
    RETURN;
  END IF;
  full_xid := synchro._full_xid(xid, xmax);
  WHILE NOT pg_visible_in_snapshot(full_xid, pg_current_snapshot()) LOOP
    tries := tries + 1;
    IF tries > 10000 THEN
      -- Retryable: the runner backs off and tries the same transaction again.
      RAISE EXCEPTION 'source transaction not visible yet' USING ERRCODE = 'serialization_failure';
    END IF;
    PERFORM pg_sleep(0.001);
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._await_visible(bigint) FROM PUBLIC;

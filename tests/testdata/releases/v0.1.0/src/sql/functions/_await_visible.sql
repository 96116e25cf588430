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
BEGIN
  IF xid IS NOT NULL THEN
    PERFORM synchro._await_visible_all(ARRAY[xid]);
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._await_visible(bigint) FROM PUBLIC;

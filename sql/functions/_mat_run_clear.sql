-- Empties the set-based run's work tables (pg_temp.synchro_b_*) for the next run of
-- this batch or of a later one. synchro._stage_reset empties only the stage table,
-- and truncates these with it when their dead space grows: it says why rows are
-- deleted, not truncated.
CREATE OR REPLACE FUNCTION synchro._mat_run_clear() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from the materialization paths, under their pinned
-- search_path. plpgsql: the body names pg_temp work tables that do not exist at
-- install time.
AS $$
BEGIN
  DELETE FROM pg_temp.synchro_b_txn;
  DELETE FROM pg_temp.synchro_b_rows;
  DELETE FROM pg_temp.synchro_b_links;
  DELETE FROM pg_temp.synchro_b_scopes;
  DELETE FROM pg_temp.synchro_b_old;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_clear() FROM PUBLIC;

-- Empties the session's staging and work tables at the end of a materialization batch
-- (and of the baseline), inside its transaction. They keep their rows across commits
-- (runner_stage_open says why), so this is what empties them. Small batches delete
-- their rows: no truncation, so no relcache invalidation and no replanning of the
-- statements that use them. A batch with many rows, and every 64th batch, truncates
-- instead: temporary tables are never vacuumed, and truncation gives back the space
-- the deleted rows of the batches before it still hold.
CREATE OR REPLACE FUNCTION synchro._stage_reset(big boolean) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  n int := coalesce(nullif(current_setting('synchro.stage_resets', true), ''), '0')::int + 1;
BEGIN
  IF big OR n >= 64 THEN
    TRUNCATE pg_temp.synchro_stage, pg_temp.synchro_w_rows, pg_temp.synchro_w_final, pg_temp.synchro_w_impacted,
             pg_temp.synchro_w_scopes, pg_temp.synchro_w_depvals, pg_temp.synchro_w_oldscopes,
             pg_temp.synchro_b_txn, pg_temp.synchro_b_rows, pg_temp.synchro_b_links, pg_temp.synchro_b_scopes;
    n := 0;
  ELSE
    DELETE FROM pg_temp.synchro_stage;
    PERFORM synchro._stage_clear(false);
    DELETE FROM pg_temp.synchro_b_txn;
    DELETE FROM pg_temp.synchro_b_rows;
    DELETE FROM pg_temp.synchro_b_links;
    DELETE FROM pg_temp.synchro_b_scopes;
  END IF;
  -- Session-level on purpose: the count goes on across batches. A rolled-back batch
  -- does not count (its rows went with it).
  PERFORM set_config('synchro.stage_resets', n::text, false);
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_reset(boolean) FROM PUBLIC;

-- Empties the session's staging and work tables at the end of a materialization batch
-- (and of the baseline), inside its transaction. They keep their rows across commits
-- (runner_stage_open says why), so this is what empties them. staged: the rows the
-- batch staged (NULL: truncate now).
--
-- Most batches delete their rows: no truncation, so no relcache invalidation, no
-- replanning of the statements that use the tables, and no new files. Truncating a
-- dozen temporary tables creates and unlinks two dozen files: 10 ms on a quiet
-- machine, 100–250 ms under I/O load, which was the largest cost of a 1,000-row batch.
-- Temporary tables are never vacuumed, though, so the deleted rows' space (and their
-- index entries) is given back by a truncation once the batches since the last one
-- have staged 200,000 rows, and at once after a batch of more than 50,000 (deleting
-- that many costs more than the truncation).
CREATE OR REPLACE FUNCTION synchro._stage_reset(staged bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  since bigint := coalesce(nullif(current_setting('synchro.stage_rows', true), ''), '0')::bigint
                  + coalesce(staged, 0);
BEGIN
  IF staged IS NULL OR staged > 50000 OR since > 200000 THEN
    TRUNCATE pg_temp.synchro_stage, pg_temp.synchro_w_rows, pg_temp.synchro_w_final, pg_temp.synchro_w_impacted,
             pg_temp.synchro_w_scopes, pg_temp.synchro_w_depvals, pg_temp.synchro_w_oldscopes,
             pg_temp.synchro_b_txn, pg_temp.synchro_b_rows, pg_temp.synchro_b_links, pg_temp.synchro_b_scopes,
             pg_temp.synchro_b_old;
    since := 0;
  ELSE
    DELETE FROM pg_temp.synchro_stage;
    PERFORM synchro._stage_clear(false);
    DELETE FROM pg_temp.synchro_b_txn;
    DELETE FROM pg_temp.synchro_b_rows;
    DELETE FROM pg_temp.synchro_b_links;
    DELETE FROM pg_temp.synchro_b_scopes;
    DELETE FROM pg_temp.synchro_b_old;
  END IF;
  -- Session-level on purpose: the count goes on across batches. A rolled-back batch
  -- does not count (its rows went with it).
  PERFORM set_config('synchro.stage_rows', since::text, false);
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_reset(bigint) FROM PUBLIC;

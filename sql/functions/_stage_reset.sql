-- Empties the session's staging and work tables at the end of a materialization batch
-- (and of the baseline), inside its transaction. They keep their rows across commits
-- (runner_stage_open says why), so this is what empties them. staged: the rows the
-- batch staged, -1 when the caller did not count them (counted here if needed), NULL:
-- truncate now.
--
-- Most batches delete their rows: no truncation, so no relcache invalidation, no
-- replanning of the statements that use the tables, and no new files. Truncating a
-- dozen temporary tables creates and unlinks two dozen files: 10 ms on a quiet
-- machine, 100–250 ms under I/O load, which was the largest cost of a 1,000-row batch.
-- Temporary tables are never vacuumed, though: page pruning lets later batches reuse
-- part of the deleted rows' space, but the tables still grow (about 85 bytes per
-- 1-row batch, 1.7 MB after 20,000 of them), and every batch scans the stage table
-- and its work tables whole, dead pages included: under a steady load of small
-- batches the fixed cost of a batch grew with the batches since the last truncation.
-- So the space is given back when it dominates: once the stage table is over 1 MB and
-- over four times what this batch staged (at most about 512 bytes a row, so a large
-- batch's own rows never trigger it), at once after a batch of more than 50,000 rows
-- (deleting that many costs more than the truncation), and when staged is NULL.
CREATE OR REPLACE FUNCTION synchro._stage_reset(staged bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  -- The size of the relation's main fork: a cached block count, no scan.
  bytes bigint := pg_catalog.pg_relation_size('pg_temp.synchro_stage'::regclass);
BEGIN
  IF bytes > 1048576 AND staged IS NOT NULL AND staged < 0 THEN
    -- Counted only when it can matter: a small table never truncates.
    SELECT count(*) INTO staged FROM pg_temp.synchro_stage;
  END IF;
  IF staged IS NULL OR staged > 50000 OR (bytes > 1048576 AND bytes > 4 * 512 * staged) THEN
    TRUNCATE pg_temp.synchro_stage, pg_temp.synchro_w_rows, pg_temp.synchro_w_final, pg_temp.synchro_w_impacted,
             pg_temp.synchro_w_scopes, pg_temp.synchro_w_depvals, pg_temp.synchro_w_oldscopes,
             pg_temp.synchro_b_txn, pg_temp.synchro_b_rows, pg_temp.synchro_b_links, pg_temp.synchro_b_scopes,
             pg_temp.synchro_b_old, pg_temp.synchro_b_points;
  ELSE
    -- Only the stage table holds rows here: synchro._materialize_txn and
    -- synchro._materialize_run each empty their own work tables before they return,
    -- and a failure rolls their rows back (temporary tables are transactional), so
    -- the work tables are empty between calls. Deleting from a dozen empty tables
    -- cost a dozen statements per batch.
    DELETE FROM pg_temp.synchro_stage;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_reset(bigint) FROM PUBLIC;

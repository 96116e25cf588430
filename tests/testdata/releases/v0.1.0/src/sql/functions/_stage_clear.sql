-- Empties the per-transaction work tables of synchro._materialize_txn between source
-- transactions that share one database commit (ON COMMIT DELETE ROWS empties them at
-- commit anyway). The staged batch itself (pg_temp.synchro_stage) stays: later
-- transactions of the batch still need it.
CREATE OR REPLACE FUNCTION synchro._stage_clear(big boolean) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
BEGIN
  IF big THEN
    -- A large transaction: TRUNCATE beats deleting row by row.
    TRUNCATE pg_temp.synchro_w_rows, pg_temp.synchro_w_final, pg_temp.synchro_w_impacted,
             pg_temp.synchro_w_scopes, pg_temp.synchro_w_depvals, pg_temp.synchro_w_oldscopes;
    RETURN;
  END IF;
  DELETE FROM pg_temp.synchro_w_rows;
  DELETE FROM pg_temp.synchro_w_final;
  DELETE FROM pg_temp.synchro_w_impacted;
  DELETE FROM pg_temp.synchro_w_scopes;
  DELETE FROM pg_temp.synchro_w_depvals;
  DELETE FROM pg_temp.synchro_w_oldscopes;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_clear(boolean) FROM PUBLIC;

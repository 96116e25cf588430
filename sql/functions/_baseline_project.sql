-- The first start's baseline of the registered projections: every row of every relation
-- registered in generation reg (synchro._baseline_rows, read by the caller's snapshot:
-- the REPEATABLE READ transaction that imported the new slot's exported snapshot), its
-- rule index and its membership, in one transaction. A stream reset stages the same rows
-- with synchro._baseline_rows and indexes them by the same helpers in short chunks
-- (synchro.runner_reset_index).
CREATE OR REPLACE FUNCTION synchro._baseline_project(reg bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path and the row-image
-- settings.
AS $$
BEGIN
  PERFORM synchro._baseline_rows(reg, 'synchro');

  -- Rule index, then membership, of every projected row.
  PERFORM synchro._baseline_index(reg, 'rules', NULL, NULL, NULL);
  PERFORM synchro._baseline_index(reg, 'scopes', NULL, NULL, NULL);
END
$$;

REVOKE ALL ON FUNCTION synchro._baseline_project(bigint) FROM PUBLIC;

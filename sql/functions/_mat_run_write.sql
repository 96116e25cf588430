-- The half of the set-based run (synchro._materialize_run) that reads or writes state
-- the batch before may have changed, from the links synchro._mat_run_prepare left in
-- the work tables: the change records, projection, scopes (memberships before, via
-- rules), effects, membership and the ledger, in that order. The caller holds the
-- progress row (FOR UPDATE) and checked the stream position, and empties the work
-- tables after.
CREATE OR REPLACE FUNCTION synchro._mat_run_write(
  gen bigint, reg bigint, n_rows int, multi boolean, deletes boolean, anyknown boolean)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run and
-- synchro.materialize_write, under the pinned search_path, row-image settings and
-- join methods of the run.
AS $$
DECLARE
  n_old int;
BEGIN
  -- Consumer groups (issue 11): the run's per-transaction change record, from the links
  -- and the images rendered with them.
  PERFORM synchro._mat_changes(gen, NULL, NULL);

  IF EXISTS (SELECT 1 FROM pg_temp.synchro_b_links l WHERE l.table_id IS NULL) THEN
    -- The run changes dependency rows (no table id): a row's scopes can change where
    -- it has no link, and a via rule reads the dependency rows as they stand at each
    -- transaction. The membership timeline (synchro._mat_run_points) and its scopes
    -- read the stored state as it was before the run, so they come before the
    -- projections and rule values are written.
    PERFORM synchro._mat_run_points(reg);
    n_old := synchro._mat_run_dep_scopes(reg, n_rows > 1000);
    PERFORM synchro._mat_run_project(reg, deletes, anyknown);
    PERFORM synchro._mat_run_dep_effects(gen);
    PERFORM synchro._mat_run_dep_membership(n_old);
    DELETE FROM pg_temp.synchro_b_points;
  ELSE
    PERFORM synchro._mat_run_project(reg, deletes, anyknown);
    n_old := synchro._mat_run_scopes(reg, n_rows > 1000);
    PERFORM synchro._mat_run_effects(gen, multi);
    PERFORM synchro._mat_run_membership(n_old);
  END IF;
  PERFORM synchro._mat_run_ledger(gen, reg);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_write(bigint, bigint, int, boolean, boolean, boolean) FROM PUBLIC;

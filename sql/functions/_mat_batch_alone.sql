-- The staged batch's transactions that the set-based path (synchro._materialize_run)
-- never takes, whatever the bootstrap state: those with a TRUNCATE, a message other
-- than a fence (a registry activation), an unchanged-TOAST column, or an event of a
-- relation that is neither synced nor a capture dependency (one the pack does not
-- know: the reference path names the poison). The last is found among the batch's
-- Relation rows, and every transaction with an event of it goes alone: the runner
-- stages a shape once per batch, before its first event, not in every transaction
-- that uses it. Dependency changes go set-based since migration 00029
-- (synchro._mat_run_points).
-- Used by synchro.materialize_batch (which adds the bootstrap's) and by
-- synchro.materialize_prepare (which prepares only a batch without any).
CREATE OR REPLACE FUNCTION synchro._mat_batch_alone() RETURNS int[]
LANGUAGE plpgsql
-- No SET clause: called only from the materialization paths, under their pinned
-- search_path. plpgsql: the body names pg_temp work tables that do not exist at
-- install time.
AS $$
DECLARE
  alone int[];
BEGIN
  WITH odd AS MATERIALIZED (
    SELECT DISTINCT s.relid FROM pg_temp.synchro_stage s
      LEFT JOIN synchro.relation r ON r.relid = s.relid
     WHERE s.kind = 'R' AND (r.registration_kind IN ('synced', 'capture_dependency')) IS NOT TRUE)
  SELECT coalesce(array_agg(DISTINCT s.txn), '{}') INTO alone
    FROM pg_temp.synchro_stage s
   WHERE s.kind = 'T'
      OR (s.kind = 'M' AND s.prefix IS DISTINCT FROM 'synchro.fence')
      OR (s.kind IN ('R', 'I', 'U', 'D') AND s.relid IN (SELECT o.relid FROM odd o))
      OR cardinality(s.toast) > 0;
  RETURN alone;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_batch_alone() FROM PUBLIC;

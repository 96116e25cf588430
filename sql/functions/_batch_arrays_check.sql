-- The one check of a staged batch's description that materialize_batch,
-- materialize_prepare and materialize_write share: element i + 1 of each array
-- describes staged transaction i, so they are non-empty and of one length, else
-- invalid_parameter_value naming the caller (never a value). Returns the length.
CREATE OR REPLACE FUNCTION synchro._batch_arrays_check(
  caller text, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[], commit_times timestamptz[])
RETURNS int
LANGUAGE plpgsql
IMMUTABLE
-- No SET clause: called only from the materialization entry points, which pinned
-- search_path.
AS $$
DECLARE
  n int := coalesce(cardinality(commit_lsns), 0);
BEGIN
  IF n = 0 OR cardinality(end_lsns) IS DISTINCT FROM n OR cardinality(xids) IS DISTINCT FROM n
     OR cardinality(commit_times) IS DISTINCT FROM n THEN
    RAISE EXCEPTION '%: the batch arrays must be non-empty and of one length', caller
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  RETURN n;
END
$$;

REVOKE ALL ON FUNCTION synchro._batch_arrays_check(text, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) FROM PUBLIC;

-- synchro.release_consumer_retention (docs/sql/release_consumer_retention.md): the
-- operator's explicit destructive release. The group (active, or removed within its
-- resume window) stops holding back compaction of the change record; once compaction
-- passes its checkpoint, read_changes answers SY409 and the group must be recreated
-- under a new name. For a group that stopped consuming and pins the change record.
CREATE OR REPLACE FUNCTION synchro.release_consumer_retention(name text, confirm text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
    RAISE EXCEPTION 'invalid_argument: name must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
  END IF;
  IF confirm IS DISTINCT FROM name THEN
    RAISE EXCEPTION 'invalid_argument: confirm must equal name' USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.consumer_group_state cg
     SET retention_released_at = coalesce(cg.retention_released_at, now())
   WHERE cg.name = release_consumer_retention.name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'invalid_argument: unknown consumer group' USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro.release_consumer_retention(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.release_consumer_retention(text, text) TO synchro_operator;

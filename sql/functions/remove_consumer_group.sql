-- synchro.remove_consumer_group (CONTRACT.md "Consumer groups";
-- docs/sql/remove_consumer_group.md). A fenced state change, never a row deletion: the
-- lease ends (its holder's next call is SY412), and the tombstone keeps the name from
-- being created again. The group's unacknowledged changes stay protected from
-- compaction for the resume window (setting consumer_group_resume_window_seconds).
-- Removing a removed group changes nothing.
CREATE OR REPLACE FUNCTION synchro.remove_consumer_group(name text, confirm text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g synchro.consumer_group_state;
BEGIN
  IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
    RAISE EXCEPTION 'invalid_argument: name must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
  END IF;
  IF confirm IS DISTINCT FROM name THEN
    RAISE EXCEPTION 'invalid_argument: confirm must equal name' USING ERRCODE = 'SY400';
  END IF;
  SELECT * INTO g FROM synchro.consumer_group_state cg WHERE cg.name = remove_consumer_group.name FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'invalid_argument: unknown consumer group' USING ERRCODE = 'SY400';
  END IF;
  IF g.removed_at IS NOT NULL THEN
    RETURN;
  END IF;
  UPDATE synchro.consumer_group_state cg
     SET removed_at = now(), lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL, handed_through = NULL
   WHERE cg.name = g.name;
END
$$;

REVOKE ALL ON FUNCTION synchro.remove_consumer_group(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.remove_consumer_group(text, text) TO synchro_consumer;

-- Whether materialization records the consumer groups' change record (synchro.change):
-- only while a consumer group exists (not removed). A removed group reads nothing again,
-- and a group created later starts after the high-watermark it finds (migration 00020,
-- synchro.create_consumer_group).
--
-- The callers hold the progress row FOR UPDATE (synchro._materialize_run,
-- synchro._materialize_txn) from the start of their batch to its commit, and
-- synchro.create_consumer_group reads the high-watermark FOR SHARE: a batch that found
-- no group has committed when a creation reads it, and a batch that starts after the
-- creation finds the group. No transaction past a new group's start goes unrecorded.
CREATE OR REPLACE FUNCTION synchro._change_capture_on() RETURNS boolean
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from the materialization paths, under
-- the pinned search_path of their callers.
AS $$
  SELECT EXISTS (SELECT 1 FROM synchro.consumer_group_state g WHERE g.removed_at IS NULL)
$$;

REVOKE ALL ON FUNCTION synchro._change_capture_on() FROM PUBLIC;

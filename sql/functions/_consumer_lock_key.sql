-- The advisory-lock key that orders the creation of a consumer group at `earliest`
-- against compaction of the change record (synchro._consumer_floor takes it shared,
-- synchro.create_consumer_group exclusive): a group created while compact runs either
-- is seen by compact's floor or reads the horizon compact recorded, never a checkpoint
-- below changes already deleted. Hashed with the per-install secret (synchro._lock_seed)
-- so no other role can take it by guessing.
CREATE OR REPLACE FUNCTION synchro._consumer_lock_key() RETURNS bigint
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already. plpgsql: a sql body is checked at install, before
-- synchro._lock_seed (a later file) exists.
AS $$
BEGIN
  RETURN pg_catalog.hashtextextended('synchro.consumer_group_floor', synchro._lock_seed());
END
$$;

REVOKE ALL ON FUNCTION synchro._consumer_lock_key() FROM PUBLIC;

-- The per-install secret every advisory-lock key of the pack is hashed with
-- (hashtextextended(name, seed)): other roles share the advisory-lock space but cannot
-- compute the keys, so they cannot take the runner claim, the registry lock or push's
-- per-mutation locks by guessing. Made once at install (migration 00003) from the
-- server key; fails closed when missing, never hashes with a NULL seed (a NULL key would
-- make pg_advisory_lock a silent no-op).
CREATE OR REPLACE FUNCTION synchro._lock_seed() RETURNS bigint
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  seed bigint;
BEGIN
  SELECT s.value::bigint INTO STRICT seed FROM synchro.setting s WHERE s.name = 'lock_seed';
  RETURN seed;
END
$$;

REVOKE ALL ON FUNCTION synchro._lock_seed() FROM PUBLIC;

-- The registry lock every staging call (synchro._pending_generation) and every
-- activation takes first. Operators take turns on the advisory lock, but a transaction
-- at REPEATABLE READ or SERIALIZABLE took its snapshot before it waited for the lock:
-- it staged into, or activated, the pending generation without seeing what another
-- operator had staged meanwhile (a rule activated without its prefix's generation
-- changing, so old cursors were reinterpreted; a table activated without its fence
-- triggers: TestRegistryStaleSnapshotStaging). Each of them also writes the one row of
-- synchro.registry_clock: such a transaction then fails with 40001 (serialization
-- failure) and is retried whole, with a snapshot that sees everything. Under READ
-- COMMITTED the update simply follows the lock.
CREATE OR REPLACE FUNCTION synchro._registry_lock() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.registry', synchro._lock_seed()));
  UPDATE synchro.registry_clock SET changes = changes + 1;
END
$$;

REVOKE ALL ON FUNCTION synchro._registry_lock() FROM PUBLIC;

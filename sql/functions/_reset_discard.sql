-- Discards the staged state of a reset's current candidate: the staged tables, and the
-- replay and change rows its catch-up wrote under the target generation (never visible: that
-- generation is not active). reset_baseline records stay (immutable, and they never
-- count unless their reset activates) until a new candidate replaces them
-- (synchro.runner_reset_candidate). The candidate slot itself is dropped by the
-- runner (a replication privilege the operator's transaction need not have).
CREATE OR REPLACE FUNCTION synchro._reset_discard(reset_id uuid) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  target bigint;
BEGIN
  SELECT r.target_generation INTO STRICT target FROM synchro.reset r WHERE r.reset_id = _reset_discard.reset_id;
  PERFORM synchro._reset_drop_tables('synchro_reset');
  DELETE FROM synchro.effect e WHERE e.stream_generation = target;
  -- The consumer groups' change records of the catch-up too: no group reads them (a
  -- group is bound to its stream generation), and compaction took them only later.
  DELETE FROM synchro.change c WHERE c.stream_generation = target;
  DELETE FROM synchro.event e WHERE e.stream_generation = target;
  DELETE FROM synchro.txn x WHERE x.stream_generation = target;
  DELETE FROM synchro.quarantine q WHERE q.stream_generation = target;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_discard(uuid) FROM PUBLIC;

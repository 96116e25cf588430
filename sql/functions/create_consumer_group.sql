-- synchro.create_consumer_group (CONTRACT.md "Consumer groups"; docs/sql/create_consumer_group.md).
-- A new group's checkpoint: `earliest` is just before the oldest retained change
-- (transaction_end of the change-record horizon, or generation_start); `latest` is the
-- materialization high-watermark. Names are never reused: an existing or removed
-- (tombstoned) name is SY400.
CREATE OR REPLACE FUNCTION synchro.create_consumer_group(name text, start text DEFAULT 'earliest',
                                                         table_ids text[] DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  p       synchro.progress;
  tids    text[];
  cp      pg_lsn;
  horizon pg_lsn;
BEGIN
  IF name IS NULL OR name !~ '^[a-z][a-z0-9_]{0,62}$' THEN
    RAISE EXCEPTION 'invalid_argument: name must match ^[a-z][a-z0-9_]{0,62}$' USING ERRCODE = 'SY400';
  END IF;
  IF start IS NULL OR start NOT IN ('earliest', 'latest') THEN
    RAISE EXCEPTION 'invalid_argument: start must be earliest or latest' USING ERRCODE = 'SY400';
  END IF;
  IF table_ids IS NOT NULL THEN
    IF cardinality(table_ids) NOT BETWEEN 1 AND 1000 OR array_position(table_ids, NULL) IS NOT NULL THEN
      RAISE EXCEPTION 'invalid_argument: table_ids must be NULL or 1 to 1000 table ids' USING ERRCODE = 'SY400';
    END IF;
    -- Stored sorted and distinct; every one a synced table's id.
    SELECT array_agg(DISTINCT x ORDER BY x) INTO tids FROM unnest(table_ids) x;
    -- A synced table registered now (in the active or the pending generation): an
    -- unregistered table keeps its relation row, and its id, for ever.
    IF EXISTS (SELECT 1 FROM unnest(tids) x
                WHERE NOT EXISTS (SELECT 1 FROM synchro.relation r
                                    JOIN synchro.registration g ON g.relation_id = r.relation_id
                                    JOIN synchro.registry_generation rg ON rg.generation = g.generation
                                                                       AND rg.state IN ('active', 'pending')
                                   WHERE r.table_id = x AND r.registration_kind = 'synced')) THEN
      RAISE EXCEPTION 'invalid_argument: unknown table_id' USING ERRCODE = 'SY400';
    END IF;
  END IF;

  -- READ COMMITTED only, as synchro.compact: the horizon and the high-watermark are
  -- read after the lock below, and only a statement snapshot taken after that wait sees
  -- what compaction committed before it. A REPEATABLE READ snapshot taken earlier read
  -- an older horizon: the group started below changes a compaction batch had already
  -- deleted, in part of a transaction, and was handed that transaction split
  -- (TestConsumerGroupCreateRefusedOutsideReadCommitted, found by review 2026-12-05).
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'invalid_argument: create_consumer_group must run at READ COMMITTED (the start is read after the compaction lock)'
      USING ERRCODE = 'SY400';
  END IF;
  -- Against compaction of the change record (synchro._consumer_lock_key): the horizon
  -- read below is final until this transaction ends.
  PERFORM pg_advisory_xact_lock(synchro._consumer_lock_key());
  SELECT * INTO p FROM synchro.progress;
  IF FOUND THEN
    IF start = 'latest' THEN
      -- Past every change recorded: a projection bootstrap merged at an idle boundary
      -- writes its changes at its consistent point less one, above the last
      -- materialized transaction (TestConsumerGroupLatestAfterIdleMerge).
      cp := greatest(coalesce(p.materialized_commit_lsn, p.generation_start_lsn),
                     (SELECT max(c.commit_lsn) FROM synchro.change c WHERE c.stream_generation = p.stream_generation));
    ELSE
      SELECT r.horizon_commit_lsn INTO horizon FROM synchro.change_retention r
       WHERE r.stream_generation = p.stream_generation;
      cp := coalesce(horizon, p.generation_start_lsn);
    END IF;
  END IF;
  -- Before the stream exists both starts are the first generation's start
  -- (synchro._consumer_leased adopts it).
  -- Checked first, so a refused name draws no group number; a concurrent creation of the
  -- same name fails on the primary key instead.
  IF EXISTS (SELECT 1 FROM synchro.consumer_group_state cg WHERE cg.name = create_consumer_group.name) THEN
    RAISE EXCEPTION 'invalid_argument: consumer group name already exists or was removed' USING ERRCODE = 'SY400';
  END IF;
  BEGIN
    INSERT INTO synchro.consumer_group_state (name, table_ids, stream_generation, checkpoint_lsn)
    VALUES (create_consumer_group.name, tids, p.stream_generation, cp);
  EXCEPTION WHEN unique_violation THEN
    RAISE EXCEPTION 'invalid_argument: consumer group name already exists or was removed' USING ERRCODE = 'SY400';
  END;
END
$$;

REVOKE ALL ON FUNCTION synchro.create_consumer_group(text, text, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.create_consumer_group(text, text, text[]) TO synchro_consumer;

-- A phase of materialization, alone in its own function: the per-transaction change
-- record consumer groups read (synchro.change), one set-based INSERT per call.
--
-- Each synced row a source transaction touched gets one change: its last event there
-- (event_ordinal, op, version) and the row image materialization already rendered for
-- it, never rendered again. Dependency rows are never sent to clients, so they have
-- none. Called with the same commit position and the same work tables as the phase
-- that rendered the images, in the same database transaction, so a change exists
-- exactly when its transaction is durable.
--
-- clsn NULL: the set-based run (synchro._materialize_run): every link of
-- pg_temp.synchro_b_links at its transaction's position (pg_temp.synchro_b_txn).
-- clsn given: the per-transaction path (synchro._materialize_txn): the transaction-local
-- final state pg_temp.synchro_w_final at (gen, clsn, commit_time).
CREATE OR REPLACE FUNCTION synchro._mat_changes(gen bigint, clsn pg_lsn, commit_time timestamptz) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from the materialization paths, under the pinned
-- search_path of synchro.materialize_batch. plpgsql, not sql: the body names pg_temp
-- work tables that do not exist when the pack is installed.
AS $$
BEGIN
  IF clsn IS NULL THEN
    INSERT INTO synchro.change (stream_generation, commit_lsn, event_ordinal, commit_time, relation_id, table_id, pk,
                                op, version, image)
    SELECT gen, b.commit_lsn, l.event_ordinal, b.commit_time, l.relation_id, l.table_id, l.pk,
           CASE WHEN l.op = 'delete' THEN 'delete' ELSE 'upsert' END, l.version,
           CASE WHEN l.op <> 'delete' THEN l.image END
      FROM pg_temp.synchro_b_links l
      JOIN pg_temp.synchro_b_txn b ON b.t = l.t
     WHERE l.table_id IS NOT NULL;
  ELSE
    INSERT INTO synchro.change (stream_generation, commit_lsn, event_ordinal, commit_time, relation_id, table_id, pk,
                                op, version, image)
    SELECT gen, clsn, f.event_ordinal, _mat_changes.commit_time, f.relation_id, f.table_id, f.pk,
           CASE WHEN f.op = 'delete' THEN 'delete' ELSE 'upsert' END, f.version,
           CASE WHEN f.op <> 'delete' THEN f.image END
      FROM pg_temp.synchro_w_final f
     WHERE f.registration_kind = 'synced';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_changes(bigint, pg_lsn, timestamptz) FROM PUBLIC;

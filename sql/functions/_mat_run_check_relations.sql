-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- validate the relations the run's row events were decoded with.
CREATE OR REPLACE FUNCTION synchro._mat_run_check_relations(t_first int, t_last int, reg bigint)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
BEGIN
  -- Relation identity: every Relation shape the run's events were decoded with
  -- (synchro._stage_relations: the runner stages a shape once per batch, so a shape
  -- may sit in an earlier or a replayed transaction of the batch) is exactly the
  -- registered relation of the generation in force (see synchro._materialize_txn).
  -- Each distinct shape is checked once per session and generation, then remembered in
  -- pg_temp.synchro_rel_ok (a generation's registrations never change, and a
  -- relation's row changes only when a registry activation starts a new generation:
  -- rebind_relation), so a steady stream of small batches checks nothing new.
  IF EXISTS (
    SELECT 1 FROM synchro._stage_relations(t_first, t_last) s
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_rel_ok k
                        WHERE k.generation = reg AND k.relid = s.relid AND k.nspname = s.nspname
                          AND k.relname = s.relname AND k.replident = s.replident AND k.col_names = s.col_names
                          AND k.col_types = s.col_types AND k.col_keys = s.col_keys)) THEN
    IF EXISTS (
      SELECT 1 FROM (SELECT DISTINCT s.relid, s.nspname, s.relname, s.replident, s.col_names, s.col_types, s.col_keys
                       FROM synchro._stage_relations(t_first, t_last) s) s
        LEFT JOIN synchro.relation r ON r.relid = s.relid
        LEFT JOIN synchro.registration g ON g.relation_id = r.relation_id AND g.generation = reg
       WHERE g.relation_id IS NULL
          OR synchro._relation_drifted(s.nspname, s.relname, s.replident, s.col_names, s.col_types, s.col_keys,
                                       r, g.columns, g.column_types)) THEN
      RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'relation identity';
    END IF;
    INSERT INTO pg_temp.synchro_rel_ok (generation, relid, nspname, relname, replident, col_names, col_types, col_keys)
    SELECT DISTINCT reg, s.relid, s.nspname, s.relname, s.replident, s.col_names, s.col_types, s.col_keys
      FROM synchro._stage_relations(t_first, t_last) s;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_check_relations(int, int, bigint) FROM PUBLIC;

-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- pair fences. Each staged row event of the run goes to pg_temp.synchro_b_rows with
-- its fence; returns how many.
-- Anything that does not pair one to one is a batch fallback (SYB01).
CREATE OR REPLACE FUNCTION synchro._mat_run_pair_fences(n_ev bigint, n_fence int)
RETURNS int
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
DECLARE
  n_rows int;
BEGIN
  IF n_ev > 1000 THEN
    -- Temp tables have no statistics: without them the pairing join below can be
    -- planned as a nested loop, quadratic in the run's row events. Here and in the
    -- later phases, what the plans need is the row counts (their joins are hash joins
    -- whatever the estimates), so only a few narrow columns are analyzed: whole rows (their jsonb
    -- images and arrays included) cost 110-160 ms of a 20,000-event 1,000-row
    -- backlog's ~2,000 ms in materialize_batch (pg_stat_statements).
    ANALYZE pg_temp.synchro_stage (txn, kind);
  END IF;

  -- Fence reconciliation inside each transaction (ADR 001): per row identity, the k-th
  -- row event in source order pairs with the fence of the k-th lowest registered-DML
  -- ordinal. The runner staged each fence's fields as typed columns after checking its
  -- MAC: nothing is parsed here.
  --
  -- By number first. The runner numbered each transaction's row events and its fences
  -- in decoded order (pair_no; fences only while their ordinals rise: runner/stage.go).
  -- If every row event meets the fence of its own number with the same relation, key
  -- and operation, both numberings are in the ADR's orders, so for each row identity
  -- they pair its k-th event with its k-th fence: the ADR's pairing, found by one hash
  -- join on (transaction, number) with no sort. That is every transaction whose rows
  -- fire their fences in row order (a multi-row statement fires them after its rows,
  -- in the same order). When numbers do not pair every row event (fences interleaved
  -- by an earlier row's trigger, or unnumbered), or are not in those orders (checked
  -- below), the pairing is made again by rank. A number given twice (not by the runner) pairs an event twice: synchro.event's
  -- primary key refuses the second when the run's events are written, as it refuses
  -- a replayed fence id (synchro._mat_run_ledger).
  INSERT INTO pg_temp.synchro_b_rows (t, seq, event_ordinal, op, relation_id, table_id, key_column, key_type, pk,
                                      new_row, old_pk, fence_id, version)
  SELECT ev.t, ev.seq, ev.event_ordinal, ev.op, ev.relation_id, ev.table_id, ev.key_column, ev.key_type, ev.pk,
         ev.new_row, ev.old_pk, fr.f_fence_id, fr.f_version
    FROM (SELECT s.txn AS t, s.seq, s.event_ordinal, s.pair_no,
                 CASE s.kind WHEN 'I' THEN 'insert' WHEN 'U' THEN 'update' ELSE 'delete' END AS op,
                 r.relation_id, r.table_id, r.key_column, r.key_type, r.schema_name, r.table_name,
                 r.registration_kind,
                 CASE WHEN s.kind = 'D' THEN s.old_row ->> r.key_column::text
                      ELSE s.new_row ->> r.key_column::text END AS pk,
                 s.new_row, s.old_row ->> r.key_column::text AS old_pk
            FROM pg_temp.synchro_stage s
            JOIN pg_temp.synchro_b_txn b ON b.t = s.txn
            JOIN synchro.relation r ON r.relid = s.relid
           WHERE s.kind IN ('I', 'U', 'D')) ev
    JOIN pg_temp.synchro_stage fr
      ON fr.txn = ev.t AND fr.pair_no = ev.pair_no AND fr.kind = 'M' AND fr.prefix = 'synchro.fence'
   WHERE fr.f_relation_id = ev.relation_id AND fr.f_kind = ev.registration_kind AND fr.f_op = ev.op
     AND fr.f_schema = ev.schema_name::text AND fr.f_table = ev.table_name::text
     AND fr.f_table_id IS NOT DISTINCT FROM ev.table_id
     AND CASE ev.op
           WHEN 'insert' THEN fr.f_old_key IS NULL AND fr.f_new_key = ev.pk
           WHEN 'update' THEN fr.f_old_key = ev.pk AND fr.f_new_key = ev.pk
           ELSE fr.f_old_key = ev.pk AND fr.f_new_key IS NULL END
     AND fr.f_version IS NOT NULL AND fr.f_fence_id IS NOT NULL;
  GET DIAGNOSTICS n_rows = ROW_COUNT;
  -- The numbers are checked, not trusted: in each transaction, the row events' numbers
  -- are 1..n in source order and the fences' 1..n in rising ordinal order (each number
  -- but the last has a successor of its kind that comes later, and the last is the
  -- count), else the pairing is made by rank. One hash join on (transaction, number).
  IF n_rows = n_ev AND EXISTS (
       SELECT 1 FROM pg_temp.synchro_stage a
         JOIN pg_temp.synchro_b_txn t ON t.t = a.txn
         LEFT JOIN pg_temp.synchro_stage b
           ON b.txn = a.txn AND b.pair_no = a.pair_no + 1 AND (b.kind = 'M') = (a.kind = 'M')
        WHERE a.pair_no IS NOT NULL
          AND CASE WHEN b.txn IS NULL THEN a.pair_no <> CASE WHEN a.kind = 'M' THEN t.n_fences ELSE t.n_events END
                   WHEN a.kind = 'M' THEN b.f_ordinal <= a.f_ordinal
                   ELSE b.seq <= a.seq END) THEN
    n_rows := -1;
  END IF;
  IF n_rows <> n_ev THEN
    -- Observable by tests (client_min_messages = debug1): which way the run paired.
    RAISE DEBUG 'synchro: fences paired by rank';
    DELETE FROM pg_temp.synchro_b_rows;

    -- By rank: each row event ranked within its row identity in its own transaction and
    -- paired with the fence of the same rank in the same statement.
    --
    -- The planner cannot estimate this join of two derived sets: guessing a few rows, it
    -- chose a nested loop, or a merge join on (txn, relation) alone with the key as a
    -- filter, quadratic in a transaction's rows (1.9 s for one 1,000-row transaction).
    -- A hash join on all four keys is linear (synchro._materialize_run turned nested
    -- loops and merge joins off for the whole run, and says why).
    WITH ev AS (
      SELECT x.*, row_number() OVER (PARTITION BY x.t, x.relation_id, x.pk ORDER BY x.seq) AS grp_rank
        FROM (SELECT s.txn AS t, s.seq, s.event_ordinal,
                     CASE s.kind WHEN 'I' THEN 'insert' WHEN 'U' THEN 'update' ELSE 'delete' END AS op,
                     r.relation_id, r.table_id, r.key_column, r.key_type, r.schema_name, r.table_name, r.registration_kind,
                     CASE WHEN s.kind = 'D' THEN s.old_row ->> r.key_column::text
                          ELSE s.new_row ->> r.key_column::text END AS pk,
                     s.new_row, s.old_row ->> r.key_column::text AS old_pk
                FROM pg_temp.synchro_stage s
                JOIN pg_temp.synchro_b_txn b ON b.t = s.txn
                JOIN synchro.relation r ON r.relid = s.relid
               WHERE s.kind IN ('I', 'U', 'D')) x),
    fr AS (
      SELECT s.txn AS t, s.f_relation_id AS rid, s.f_kind AS kind, s.f_schema AS sch, s.f_table AS tbl,
             s.f_op AS op, s.f_old_key AS old_key, s.f_new_key AS new_key, s.f_version AS version,
             s.f_fence_id AS fid, s.f_table_id AS tid, coalesce(s.f_new_key, s.f_old_key) AS k,
             row_number() OVER (PARTITION BY s.txn, s.f_relation_id, coalesce(s.f_new_key, s.f_old_key) COLLATE "C"
                                ORDER BY s.f_ordinal) AS rnk
        FROM pg_temp.synchro_stage s
        JOIN pg_temp.synchro_b_txn b ON b.t = s.txn
       WHERE s.kind = 'M' AND s.prefix = 'synchro.fence')
    INSERT INTO pg_temp.synchro_b_rows (t, seq, event_ordinal, op, relation_id, table_id, key_column, key_type, pk,
                                        new_row, old_pk, fence_id, version)
    SELECT ev.t, ev.seq, ev.event_ordinal, ev.op, ev.relation_id, ev.table_id, ev.key_column, ev.key_type, ev.pk,
           ev.new_row, ev.old_pk, fr.fid, fr.version
      FROM ev
      LEFT JOIN fr
        ON fr.t = ev.t AND fr.rid = ev.relation_id AND fr.k = ev.pk AND fr.rnk = ev.grp_rank
       AND fr.kind = ev.registration_kind AND fr.op = ev.op
       AND fr.sch = ev.schema_name::text AND fr.tbl = ev.table_name::text
       AND fr.tid IS NOT DISTINCT FROM ev.table_id
       AND CASE ev.op
             WHEN 'insert' THEN fr.old_key IS NULL AND fr.new_key = ev.pk
             WHEN 'update' THEN fr.old_key = ev.pk AND fr.new_key = ev.pk
             ELSE fr.old_key = ev.pk AND fr.new_key IS NULL END
       AND fr.version IS NOT NULL AND fr.fid IS NOT NULL;
    GET DIAGNOSTICS n_rows = ROW_COUNT;
  END IF;
  IF n_rows > 1000 THEN
    -- Temp tables have no statistics: give the planner real ones for the joins below.
    ANALYZE pg_temp.synchro_b_rows (t, relation_id);
  END IF;
  IF n_rows <> n_ev
     OR EXISTS (SELECT 1 FROM pg_temp.synchro_b_rows w
                 WHERE w.pk IS NULL OR (w.op = 'update' AND w.old_pk IS NOT NULL AND w.old_pk IS DISTINCT FROM w.pk)) THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'row events';
  END IF;
  -- Every row event paired, every fence used once. A fence id already in the ledger
  -- (a replayed or forged fence) is refused by synchro.event's unique index when the
  -- run's events are written (synchro._mat_run_ledger): that error, like every other one here, makes the
  -- runner re-run the batch through the reference path, which names the class.
  -- No fence pairs twice, with no count of distinct fence ids: both sides are numbered
  -- uniquely within their transaction (or ranked uniquely within their (transaction,
  -- relation, key) group) and paired on the number (or rank), so each row event meets
  -- at most one fence and each fence at most one row event; with every row event
  -- paired and as many fences as row events, the pairing is one to one.
  IF EXISTS (SELECT 1 FROM pg_temp.synchro_b_rows w WHERE w.fence_id IS NULL)
     OR n_fence <> n_rows THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'fence reconciliation';
  END IF;
  RETURN n_rows;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_pair_fences(bigint, int) FROM PUBLIC;

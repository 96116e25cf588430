-- The Relation shapes that the row and truncate events of the staged batch's
-- transactions t_first .. t_last were decoded with, as staged rows (kind 'R'): every
-- relation check reads them here (synchro._mat_check_relations for one transaction,
-- synchro._mat_run_check_relations for a run).
--
-- The runner stages a shape once per batch, before its first event there, not once
-- per transaction (runner/stage.go: the Relation row was a third of a 1-row
-- transaction's COPY). So the shapes of t_first .. t_last are the R rows staged in
-- them, and, for each relation they touch, the last R row staged before t_first:
-- the shape in effect when t_first began (a shape that changes inside the range,
-- ALTER TABLE, comes with a new Relation message and is staged in the range). The
-- carried shape is checked even when a later R row in the range replaced it before
-- the relation's first event there: stricter, never looser. A transaction re-run
-- alone after a failed batch is a batch of its own and stages its own shapes, so a
-- poison keeps its identity and its class.
--
-- Ordered by (txn, seq): carried shapes first, then the range's in staging order.
CREATE OR REPLACE FUNCTION synchro._stage_relations(t_first int, t_last int)
RETURNS TABLE (txn int, seq int, relid oid, nspname text, relname text, replident "char", col_names text[],
               col_types oid[], col_keys boolean[])
LANGUAGE plpgsql
-- plpgsql, not sql: the body reads pg_temp tables, which do not exist when the pack
-- installs. No SET clause: called only from functions that pinned search_path.
AS $$
BEGIN
  -- One scan of the stage's R rows, plus one of the range's events when the range
  -- does not start the batch (only then can it use a shape staged before it): the
  -- reference path calls this for every transaction it takes, and the stage has no
  -- index, so a scan per touched relation would grow with the batch squared.
  RETURN QUERY
  SELECT x.txn, x.seq, x.relid, x.nspname, x.relname, x.replident, x.col_names, x.col_types, x.col_keys
    FROM (SELECT s.txn, s.seq, s.relid, s.nspname, s.relname, s.replident, s.col_names, s.col_types, s.col_keys,
                 s.txn >= t_first AS inside,
                 row_number() OVER (PARTITION BY s.relid, s.txn >= t_first ORDER BY s.txn DESC, s.seq DESC) AS rn
            FROM pg_temp.synchro_stage s
           WHERE s.kind = 'R' AND s.txn <= t_last) x
   WHERE x.inside
      OR (t_first > 0 AND x.rn = 1
          AND x.relid IN (SELECT s.relid FROM pg_temp.synchro_stage s
                           WHERE s.txn BETWEEN t_first AND t_last AND s.kind IN ('I', 'U', 'D')
                          UNION ALL
                          SELECT tr.relid FROM pg_temp.synchro_stage s CROSS JOIN LATERAL unnest(s.truncated) AS tr(relid)
                           WHERE s.txn BETWEEN t_first AND t_last AND s.kind = 'T'))
   ORDER BY x.txn, x.seq;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_relations(int, int) FROM PUBLIC;

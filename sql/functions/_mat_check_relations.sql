-- A phase of synchro._materialize_txn (the per-transaction reference path), alone in
-- its own function: a TRUNCATE of a registered relation (SYP02), and
-- every Relation message of transaction t against the registration in effect at
-- reg_end (SYP04 unknown_relation, SYP03 relation_drift).
CREATE OR REPLACE FUNCTION synchro._mat_check_relations(t int, reg_end bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_txn, under the pinned
-- search_path and row-image settings of synchro.materialize_batch.
AS $$
DECLARE
  bad record;
  rel record;
BEGIN
  -- TRUNCATE of a registered relation has no row-by-row meaning: it blocks capture.
  SELECT r.relation_id INTO bad
    FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _mat_check_relations.t) s CROSS JOIN LATERAL unnest(s.truncated) AS tr(relid)
    JOIN synchro.relation r ON r.relid = tr.relid
   WHERE s.kind = 'T'
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'poison: truncate' USING ERRCODE = 'SYP02', DETAIL = format('relation_id=%s', bad.relation_id);
  END IF;

  -- Relation identity: every relation the transaction touches, as the WAL describes
  -- it, must be exactly the registered one (qualified name, DEFAULT identity on the
  -- registered key, registered columns with their registered types).
  -- Every Relation message counts, not only the first of a relid: a relation whose
  -- shape changes inside one transaction (ALTER TABLE between two writes) is staged
  -- again with its new shape. The runner stages a shape once per batch:
  -- synchro._stage_relations also gives the shapes staged before this transaction
  -- that its events use (a transaction alone in its batch, as when the runner re-runs
  -- a failed batch to quarantine one, has only its own, in staging order).
  FOR rel IN
    SELECT s.relid, s.nspname, s.relname, s.replident, s.col_names, s.col_types, s.col_keys,
           r.relation_id, r, reg.columns, reg.column_types
      FROM synchro._stage_relations(_mat_check_relations.t, _mat_check_relations.t) s
      LEFT JOIN synchro.relation r ON r.relid = s.relid
      LEFT JOIN LATERAL (
        SELECT g.columns, g.column_types FROM synchro.registration g
         WHERE g.relation_id = r.relation_id AND g.generation <= coalesce(reg_end, 0)
         ORDER BY g.generation DESC LIMIT 1) reg ON true
     ORDER BY s.txn, s.seq
  LOOP
    IF rel.relation_id IS NULL OR rel.columns IS NULL THEN
      RAISE EXCEPTION 'poison: unknown_relation' USING ERRCODE = 'SYP04';
    END IF;
    IF synchro._relation_drifted(rel.nspname, rel.relname, rel.replident, rel.col_names, rel.col_types, rel.col_keys,
                                 rel.r, rel.columns, rel.column_types) THEN
      RAISE EXCEPTION 'poison: relation_drift' USING ERRCODE = 'SYP03', DETAIL = format('relation_id=%s', rel.relation_id);
    END IF;
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_check_relations(int, bigint) FROM PUBLIC;

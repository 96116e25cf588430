-- A phase of synchro._materialize_txn (the per-transaction reference path), alone in
-- its own function: fence reconciliation of transaction t
-- (n_fences staged fence messages) with its row events in pg_temp.synchro_w_rows, which
-- get their fence_id and version (SYP01 fence_mismatch on any disagreement).
CREATE OR REPLACE FUNCTION synchro._mat_pair_fences(t int, n_fences int) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_txn, under the pinned
-- search_path and row-image settings of synchro.materialize_batch.
AS $$
DECLARE
  bad record;
BEGIN
  -- Fence reconciliation: per row identity, the k-th row event in source order pairs
  -- with the fence of the k-th lowest registered-DML ordinal, and must agree on kind,
  -- relation identity, operation and keys.
  WITH f AS (
    SELECT s.f_relation_id AS rid, s.f_kind AS kind, s.f_schema AS sch, s.f_table AS tbl, s.f_op AS op,
           s.f_old_key AS old_key, s.f_new_key AS new_key, s.f_version AS version, s.f_fence_id AS fid,
           s.f_ordinal AS ord, s.f_table_id AS tid, coalesce(s.f_new_key, s.f_old_key) AS k
      FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _mat_pair_fences.t) s
     WHERE s.kind = 'M' AND s.prefix = 'synchro.fence'),
  fr AS (SELECT f.*, row_number() OVER (PARTITION BY f.rid, f.k ORDER BY f.ord) AS rnk FROM f)
  UPDATE pg_temp.synchro_w_rows w
     SET fence_id = fr.fid, version = fr.version
    FROM fr, synchro.relation r
   WHERE fr.rid = w.relation_id AND fr.k = w.pk AND fr.rnk = w.grp_rank
     AND r.relation_id = w.relation_id
     AND fr.kind = w.registration_kind AND fr.op = w.op
     AND fr.sch = r.schema_name::text AND fr.tbl = r.table_name::text
     AND fr.tid IS NOT DISTINCT FROM w.table_id
     AND CASE w.op
           WHEN 'insert' THEN fr.old_key IS NULL AND fr.new_key = w.pk
           WHEN 'update' THEN fr.old_key = w.pk AND fr.new_key = w.pk
           ELSE fr.old_key = w.pk AND fr.new_key IS NULL END
     AND fr.version IS NOT NULL AND fr.fid IS NOT NULL;

  SELECT w.relation_id INTO bad FROM pg_temp.synchro_w_rows w WHERE w.fence_id IS NULL LIMIT 1;
  IF FOUND THEN
    -- A row event without its fence: a bypassed trigger, a forged or reordered fence.
    RAISE EXCEPTION 'poison: fence_mismatch' USING ERRCODE = 'SYP01', DETAIL = format('relation_id=%s', bad.relation_id);
  END IF;
  IF n_fences <> (SELECT count(*) FROM pg_temp.synchro_w_rows)
     OR n_fences <> (SELECT count(DISTINCT w.fence_id) FROM pg_temp.synchro_w_rows w) THEN
    -- A fence without its row event, or one fence paired twice.
    RAISE EXCEPTION 'poison: fence_mismatch' USING ERRCODE = 'SYP01', DETAIL = 'unpaired or duplicate fence';
  END IF;
  -- Probe the fence_id index with this transaction's ids: the ledger only grows, and a
  -- join could scan it whole (temp tables have no statistics for the planner).
  SELECT e.relation_id INTO bad FROM synchro.event e
   WHERE e.fence_id = ANY (ARRAY(SELECT w.fence_id FROM pg_temp.synchro_w_rows w)) LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'poison: fence_mismatch' USING ERRCODE = 'SYP01', DETAIL = format('relation_id=%s', bad.relation_id);
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_pair_fences(int, int) FROM PUBLIC;

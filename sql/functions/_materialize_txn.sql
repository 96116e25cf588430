-- synchro._materialize_txn: one committed source transaction of a batch, alone.
--
-- synchro.materialize_batch calls it for transaction t of the staged batch (rows of
-- pg_temp.synchro_stage with txn = t) when that transaction cannot take the set-based
-- path (synchro._materialize_run): it carries a registry activation, a TRUNCATE, an
-- unchanged-TOAST column or an event of a relation the pack does not know, or the
-- runner re-runs a failed
-- batch one transaction at a time to quarantine the failing one with its own
-- identity. It is also the reference implementation the set-based path must equal
-- (tests/batch_test.go). Everything below commits atomically with the caller's
-- transaction: transaction and event replay identities, fence reconciliation,
-- projections, rule indexes, membership, pull effects, write-fence coverage and the
-- progress row.
--
-- Poison (a blocking failure the runner quarantines) raises SYP01..SYP08; the message
-- names the class and never carries values:
--   SYP01 fence_mismatch  SYP02 truncate  SYP03 relation_drift  SYP04 unknown_relation
--   SYP05 message_format  SYP06 stream_order  SYP07 toast_missing
--   SYP08 bootstrap_incomplete (synchro._bootstrap_merge, synchro._bootstrap_catch_up)
-- and SYW01 bootstrap_pending, not a poison: a projection bootstrap in effect is not
-- staged yet (the runner stages it and replays the transaction).
-- DETAIL carries relation_id=<n> when a relation is known.
CREATE OR REPLACE FUNCTION synchro._materialize_txn(
  t int, stream_generation bigint, commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint, commit_time timestamptz)
RETURNS text
LANGUAGE plpgsql
-- No SET clause: called only from synchro.materialize_batch, which pinned
-- search_path and the row-image settings.
AS $$
DECLARE
  gen       bigint := _materialize_txn.stream_generation;
  clsn      pg_lsn := _materialize_txn.commit_lsn;
  p         synchro.progress;
  reg_start bigint;
  reg_end   bigint;
  act       record;
  act_seqs  int[] := '{}';
  act_gens  bigint[] := '{}';
  act_gen   bigint;
  bad       record;
  rel       record;
  t         record;
  col       text;
  val       jsonb;
  -- [relation_id, pk, column, rendered value]: unchanged TOAST from the prior projection.
  rendered  jsonb := '[]';
  fill      record;
  n_events  int;
  n_fences  int;
BEGIN
  SELECT * INTO p FROM synchro.progress FOR UPDATE;
  IF NOT FOUND OR p.stream_generation <> gen THEN
    RAISE EXCEPTION 'poison: stream_order' USING ERRCODE = 'SYP06', DETAIL = 'not the active stream generation';
  END IF;
  -- Replay of a durable transaction: same result, nothing new.
  IF EXISTS (SELECT 1 FROM synchro.txn x WHERE x.stream_generation = gen AND x.commit_lsn = clsn) THEN
    RETURN 'duplicate';
  END IF;
  -- Serial commit order, and nothing below the processed boundary can be new.
  IF clsn <= coalesce(p.materialized_commit_lsn, p.generation_start_lsn) OR clsn < p.processed_end_lsn
     OR _materialize_txn.end_lsn <= clsn THEN
    RAISE EXCEPTION 'poison: stream_order' USING ERRCODE = 'SYP06', DETAIL = 'commit position out of order';
  END IF;

  -- The source transaction's own writes to synchro tables (write fences, registry
  -- generations) are visible: synchro.materialize_batch, its only caller, waited for
  -- the whole batch first (synchro._await_visible_all).

  SELECT count(*) FILTER (WHERE s.kind IN ('I', 'U', 'D', 'T')),
         count(*) FILTER (WHERE s.kind = 'M' AND s.prefix = 'synchro.fence')
    INTO n_events, n_fences
    FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s;
  IF n_events > 1000 THEN
    -- Big transactions: give the planner real statistics for the joins below (temp
    -- tables have none, and nested loops over thousands of rows cost seconds), for
    -- the columns they join and filter on only (see synchro._mat_run_pair_fences).
    ANALYZE pg_temp.synchro_stage (txn, seq, kind, relid, prefix, f_relation_id, f_op, f_old_key, f_new_key, f_ordinal);
  END IF;

  -- Messages: only the documented synchro prefixes exist.
  IF EXISTS (SELECT 1 FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s
              WHERE s.kind = 'M' AND s.prefix NOT IN ('synchro.fence', 'synchro.registry')) THEN
    RAISE EXCEPTION 'poison: message_format' USING ERRCODE = 'SYP05', DETAIL = 'unknown synchro message prefix';
  END IF;

  -- Registry activations in source order: each must follow the generation in effect.
  reg_start := p.registry_generation;
  reg_end := reg_start;
  FOR act IN SELECT s.seq, s.a_generation, s.a_previous
               FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s
              WHERE s.kind = 'M' AND s.prefix = 'synchro.registry' ORDER BY s.seq LOOP
    IF act.a_generation IS NULL
       OR NOT EXISTS (SELECT 1 FROM synchro.registry_generation g
                       WHERE g.generation = act.a_generation AND g.state IN ('active', 'retired'))
       OR act.a_previous IS DISTINCT FROM reg_end THEN
      RAISE EXCEPTION 'poison: message_format' USING ERRCODE = 'SYP05', DETAIL = 'registry activation out of order';
    END IF;
    reg_end := act.a_generation;
    act_seqs := act_seqs || act.seq;
    act_gens := act_gens || reg_end;
  END LOOP;

  PERFORM synchro._mat_check_relations(_materialize_txn.t, reg_end);

  -- Projection bootstrap of each activation, at its position: before the row events,
  -- which all follow it here (events before an activation message name relations the
  -- previous generation holds, and a bootstrapped relation's rows are staged with them).
  FOREACH act_gen IN ARRAY act_gens LOOP
    PERFORM synchro._bootstrap_merge(act_gen);
  END LOOP;
  -- Bootstraps staged under an exported snapshot: wait for the stage (SYW01), merge it
  -- at its consistent point, or drop this transaction's events of the relation when
  -- they are in the snapshot. Then count what is left.
  IF EXISTS (SELECT 1 FROM synchro.bootstrap x WHERE x.merged_at IS NULL AND x.kind = 'project') THEN
    PERFORM synchro._bootstrap_catch_up(gen, reg_end, _materialize_txn.t, clsn, true);
    SELECT count(*) FILTER (WHERE s.kind IN ('I', 'U', 'D', 'T')),
           count(*) FILTER (WHERE s.kind = 'M' AND s.prefix = 'synchro.fence')
      INTO n_events, n_fences
      FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s;
  END IF;

  -- Row events, each with the registry generation selected by its source position.
  INSERT INTO pg_temp.synchro_w_rows (seq, event_ordinal, op, relation_id, registration_kind, table_id,
                                      key_column, key_type, pk, reg_gen, new_row, toast, grp_rank)
  SELECT s.seq, s.event_ordinal,
         CASE s.kind WHEN 'I' THEN 'insert' WHEN 'U' THEN 'update' ELSE 'delete' END,
         r.relation_id, r.registration_kind, r.table_id, r.key_column, r.key_type,
         CASE WHEN s.kind = 'D' THEN s.old_row ->> r.key_column::text ELSE s.new_row ->> r.key_column::text END,
         CASE WHEN cardinality(act_seqs) = 0 THEN reg_start
              ELSE coalesce((SELECT a.g FROM unnest(act_seqs, act_gens) AS a(sq, g)
                              WHERE a.sq < s.seq ORDER BY a.sq DESC LIMIT 1), reg_start) END,
         s.new_row, s.toast,
         row_number() OVER (PARTITION BY r.relation_id,
                            CASE WHEN s.kind = 'D' THEN s.old_row ->> r.key_column::text ELSE s.new_row ->> r.key_column::text END
                            ORDER BY s.seq)
    FROM (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s
    LEFT JOIN synchro.relation r ON r.relid = s.relid
   WHERE s.kind IN ('I', 'U', 'D');
  IF n_events > 1000 THEN
    ANALYZE pg_temp.synchro_w_rows (seq, relation_id, pk, op, grp_rank);
  END IF;

  SELECT w.relation_id INTO bad FROM pg_temp.synchro_w_rows w
   WHERE w.relation_id IS NULL
      OR NOT EXISTS (SELECT 1 FROM synchro.registration g WHERE g.generation = w.reg_gen AND g.relation_id = w.relation_id)
      -- A relation whose shape was never staged for this transaction (in it, or
      -- earlier in the batch: synchro._stage_relations). NOT IN, not a correlated
      -- NOT EXISTS: the set is read once, not once per row event.
      OR w.relation_id NOT IN (SELECT r.relation_id FROM synchro._stage_relations(_materialize_txn.t, _materialize_txn.t) s
                                 JOIN synchro.relation r ON r.relid = s.relid)
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'poison: unknown_relation' USING ERRCODE = 'SYP04', DETAIL = format('relation_id=%s', bad.relation_id);
  END IF;
  SELECT w.relation_id INTO bad FROM pg_temp.synchro_w_rows w
    LEFT JOIN (SELECT * FROM pg_temp.synchro_stage s0 WHERE s0.txn = _materialize_txn.t) s ON s.seq = w.seq
   WHERE w.pk IS NULL
      OR (w.op = 'update' AND s.old_row IS NOT NULL AND s.old_row ->> w.key_column::text IS DISTINCT FROM w.pk)
   LIMIT 1;
  IF FOUND THEN
    -- A key change (or a row without its key) cannot be paired with any fence.
    RAISE EXCEPTION 'poison: fence_mismatch' USING ERRCODE = 'SYP01', DETAIL = format('relation_id=%s', bad.relation_id);
  END IF;

  PERFORM synchro._mat_pair_fences(_materialize_txn.t, n_fences);

  -- Transaction-local projected state: the last event of each row decides.
  INSERT INTO pg_temp.synchro_w_final (relation_id, pk, pk_int, registration_kind, table_id, op, new_row, toast,
                                       version, event_ordinal)
  SELECT DISTINCT ON (w.relation_id, w.pk) w.relation_id, w.pk,
         CASE WHEN w.key_type <> 'string' THEN w.pk::bigint END,
         w.registration_kind, w.table_id, w.op, w.new_row, w.toast, w.version, w.event_ordinal
    FROM pg_temp.synchro_w_rows w
   ORDER BY w.relation_id, w.pk, w.seq DESC;
  IF n_events > 1000 THEN
    ANALYZE pg_temp.synchro_w_final (relation_id, pk, op);
  END IF;

  -- Unchanged TOAST values come from the row's previous image: an earlier event of
  -- this transaction, else the prior projection. Rare, so row by row.
  FOR t IN SELECT f.relation_id, f.pk, f.toast, reg.columns
             FROM pg_temp.synchro_w_final f
             JOIN LATERAL (SELECT g.columns FROM synchro.registration g
                            WHERE g.relation_id = f.relation_id AND g.generation <= reg_end
                            ORDER BY g.generation DESC LIMIT 1 OFFSET 0) reg ON true
            WHERE f.op <> 'delete' AND cardinality(f.toast) > 0 LOOP
    FOREACH col IN ARRAY t.toast LOOP
      CONTINUE WHEN NOT (col = ANY (t.columns::text[]));
      SELECT w.new_row -> col INTO val FROM pg_temp.synchro_w_rows w
       WHERE w.relation_id = t.relation_id AND w.pk = t.pk AND w.new_row ? col
       ORDER BY w.seq DESC LIMIT 1;
      IF FOUND THEN
        UPDATE pg_temp.synchro_w_final f SET new_row = f.new_row || jsonb_build_object(col, val)
         WHERE f.relation_id = t.relation_id AND f.pk = t.pk;
        CONTINUE;
      END IF;
      -- The prior projection holds the value rendered (an array as a JSON array, not
      -- the array's text the WAL gives): it goes into the image after rendering, not
      -- into the staged row, where rendering would cast it again (22P02 for an array:
      -- a good transaction quarantined, TestRunnerToastedArrayUpdate).
      SELECT pr.image -> col INTO val FROM synchro.projection pr
       WHERE pr.relation_id = t.relation_id AND pr.pk = t.pk AND pr.image ? col;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'poison: toast_missing' USING ERRCODE = 'SYP07', DETAIL = format('relation_id=%s', t.relation_id);
      END IF;
      rendered := rendered || jsonb_build_array(jsonb_build_array(t.relation_id, t.pk, col, val));
    END LOOP;
  END LOOP;

  -- Row images: the registered columns in the registered shape of the generation in
  -- effect (synchro._image_sql), never the live catalog's, and without running any
  -- code of the application's with the owner's rights.
  FOR rel IN
    SELECT DISTINCT f.relation_id,
           (SELECT g.generation FROM synchro.registration g
             WHERE g.relation_id = f.relation_id AND g.generation <= reg_end
             ORDER BY g.generation DESC LIMIT 1) AS generation
      FROM pg_temp.synchro_w_final f
     WHERE f.op <> 'delete'
  LOOP
    EXECUTE format('UPDATE pg_temp.synchro_w_final f SET image = %s WHERE f.relation_id = $1 AND f.op <> $2',
                   synchro._image_sql(rel.relation_id, rel.generation, 'f.new_row', false))
    USING rel.relation_id, 'delete';
  END LOOP;
  -- Unchanged TOAST values taken from the prior projection, already rendered (above).
  FOR fill IN SELECT e.value AS v FROM jsonb_array_elements(rendered) e LOOP
    UPDATE pg_temp.synchro_w_final f SET image = f.image || jsonb_build_object(fill.v ->> 2, fill.v -> 3)
     WHERE f.relation_id = (fill.v ->> 0)::bigint AND f.pk = fill.v ->> 1;
  END LOOP;

  -- Consumer groups (issue 11): the transaction's change record, from its final state
  -- and the images just rendered.
  PERFORM synchro._mat_changes(gen, clsn, _materialize_txn.commit_time);

  -- Dependency rule values before and after: the synced rows they reach are impacted.
  -- Statements below that touch the big permanent tables (projection, rule_value,
  -- membership, write_fence, event) reach them through LATERAL index probes keyed by
  -- the transaction's rows: the temp work tables have no statistics, and a hash join
  -- would scan the permanent table whole on every source transaction. OFFSET 0 keeps
  -- each LATERAL subquery from being pulled up into an ordinary join.
  PERFORM synchro._mat_dependency_values();

  DELETE FROM synchro.projection pr
   WHERE pr.ctid = ANY (ARRAY(
     SELECT x.ctid FROM pg_temp.synchro_w_final f
      CROSS JOIN LATERAL (SELECT p2.ctid FROM synchro.projection p2
                           WHERE p2.relation_id = f.relation_id AND p2.pk = f.pk OFFSET 0) x
      WHERE f.op = 'delete'));
  INSERT INTO synchro.projection AS pr (relation_id, pk, pk_int, version, image, image_bytes)
  SELECT f.relation_id, f.pk, f.pk_int, f.version, f.image, pg_catalog.octet_length(f.image::pg_catalog.text)
    FROM pg_temp.synchro_w_final f WHERE f.op <> 'delete'
  ON CONFLICT (relation_id, pk) DO UPDATE
    SET version = excluded.version, image = excluded.image, image_bytes = excluded.image_bytes;
  PERFORM synchro._refresh_rule_values(reg_end);

  PERFORM synchro._mat_dependency_values();

  -- A rule change activated in this transaction: re-index and re-evaluate the changed
  -- prefixes for every row. No incremental effects: cursors and rebuild tokens of
  -- those prefixes are stale (their membership-rule generation changed).
  IF reg_end IS DISTINCT FROM reg_start THEN
    PERFORM synchro._reevaluate_prefixes(reg_start, reg_end);
  END IF;

  -- Impacted synced rows: touched by an event, or reached through a changed
  -- dependency row. Each effect belongs to the last source event that impacted it.
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT f.relation_id, f.pk, f.event_ordinal, true
    FROM pg_temp.synchro_w_final f WHERE f.registration_kind = 'synced';
  INSERT INTO pg_temp.synchro_w_impacted AS i (relation_id, pk, event_ordinal, touched)
  SELECT v.relation_id, v.pk, max(d.event_ordinal), false
    FROM pg_temp.synchro_w_depvals d
    JOIN synchro.scope_rule r ON r.generation = reg_end AND r.via_relation_id = d.relation_id AND r.via_match = d.column_name
    CROSS JOIN LATERAL (SELECT v.relation_id, v.pk FROM synchro.rule_value v
                         WHERE v.relation_id = r.relation_id AND v.column_name = r.column_name
                           AND v.value_hash = synchro._scope_hash(d.value) AND v.value = d.value OFFSET 0) v
   GROUP BY v.relation_id, v.pk
  ON CONFLICT (relation_id, pk) DO UPDATE SET event_ordinal = greatest(i.event_ordinal, excluded.event_ordinal);

  IF n_events > 1000 THEN
    ANALYZE pg_temp.synchro_w_impacted;
    ANALYZE pg_temp.synchro_w_depvals;
  END IF;
  PERFORM synchro._evaluate_membership(reg_end);
  IF n_events > 1000 THEN
    ANALYZE pg_temp.synchro_w_scopes;
  END IF;

  PERFORM synchro._mat_effects(gen, clsn);

  -- Write-fence reconciliation: exactly these fences are now WAL-materialized.
  UPDATE synchro.write_fence wf SET coverage = 'wal', covered_at = now()
   WHERE wf.fence_id = ANY (ARRAY(SELECT w.fence_id FROM pg_temp.synchro_w_rows w)) AND wf.coverage IS NULL;

  -- Replay identities and the transaction-end high-watermark.
  INSERT INTO synchro.txn (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count)
  VALUES (gen, clsn, _materialize_txn.end_lsn, _materialize_txn.xid, _materialize_txn.commit_time, n_events);
  INSERT INTO synchro.event (stream_generation, commit_lsn, event_ordinal, relation_id, op, pk, version, fence_id,
                             registry_generation)
  SELECT gen, clsn, w.event_ordinal, w.relation_id, w.op, w.pk, w.version, w.fence_id, w.reg_gen
    FROM pg_temp.synchro_w_rows w;
  UPDATE synchro.progress
     SET materialized_commit_lsn = clsn,
         processed_end_lsn = greatest(processed_end_lsn, _materialize_txn.end_lsn),
         registry_generation = reg_end,
         updated_at = now();
  UPDATE synchro.quarantine q SET resolved_at = now(), retry_requested = false
   WHERE q.stream_generation = gen AND q.commit_lsn = clsn AND q.resolved_at IS NULL;

  PERFORM synchro._stage_clear(n_events > 5000);
  RETURN 'materialized';
END
$$;

REVOKE ALL ON FUNCTION synchro._materialize_txn(int, bigint, pg_lsn, pg_lsn, bigint, timestamptz) FROM PUBLIC;

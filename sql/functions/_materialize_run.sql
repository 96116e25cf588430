-- synchro._materialize_run: a run of consecutive ordinary source transactions of the
-- staged batch (txn t_first .. t_last), set-based: one statement per phase for the
-- whole run, whose cost grows with the run, never with the permanent tables.
--
-- Why a run can be done at once. Its transactions touch synced rows only: no
-- capture-dependency row changes, so dependency state (what via rules read) is the
-- same for every transaction of the run, and a row's scopes depend only on its own
-- image. No registry activation either, so one registry generation holds for every
-- event. Each row's history in the run is then a chain of links, one per transaction
-- that touched it (its last event there): a link's scopes come from its image, the
-- scopes before it are the previous link's (the stored membership for the first), and
-- its effects are the difference, at that transaction's commit position. Projection,
-- rule values and membership end as the last link leaves them.
--
-- It never classifies a failure: anything unexpected (a mismatched fence, drift, an
-- order problem) raises SYB01 batch_fallback, and the runner re-runs the batch one
-- transaction at a time through synchro._materialize_txn, which quarantines the
-- failing transaction with its own identity and class.
CREATE OR REPLACE FUNCTION synchro._materialize_run(
  t_first int, t_last int, stream_generation bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[],
  commit_times timestamptz[])
RETURNS text[]
LANGUAGE plpgsql
-- No SET clause: called only from synchro.materialize_batch, which pinned
-- search_path and the row-image settings.
AS $$
DECLARE
  gen     bigint := _materialize_run.stream_generation;
  p       synchro.progress;
  reg     bigint;
  n_rows  int;
  n_fence int;
  n_ev    bigint;
  big     boolean;
  rel     record;
  nestloop text;
  mergejoin text;
  outcomes text[];
  n_new   int;
  multi   boolean;
  more    boolean;
  deletes boolean;
  dropped boolean;
  known   boolean;
  anyknown boolean;
  n_old   int;
BEGIN
  SELECT * INTO p FROM synchro.progress FOR UPDATE;
  IF NOT FOUND OR p.stream_generation <> gen OR p.registry_generation IS NULL THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'stream generation';
  END IF;
  reg := p.registry_generation;

  -- The work tables are empty here: every run empties them before it returns (below),
  -- and a failed one takes its rows with it when its transaction rolls back.

  -- The run's transactions, less those already durable (a replay after a crash:
  -- same result, nothing new), each with its row events and fences counted in one scan
  -- of the stage. The ledger is probed once per transaction of the run (OFFSET 0 keeps
  -- the probe a per-row index lookup: planned as an anti join, it read every ledger
  -- row of the stream generation for each transaction, so its cost grew with the
  -- ledger).
  --
  -- Hash joins only, from here to the end of the run. The work tables have no
  -- statistics (a batch is analyzed only past 1,000 row events), and the planner,
  -- guessing a few rows, chose nested loops that rescan one work table per row of
  -- another: the generic plan PL/pgSQL keeps after five calls joined the transactions
  -- to their counts that way (27 ms for 250 one-row transactions, so larger batches got
  -- slower per transaction), and the membership and effect statements anti-joined
  -- b_old and b_scopes by a sequential scan per link (an update backlog: 3.5 times the
  -- apply time of the same inserts). A hash join is linear in the run. Lateral probes
  -- of the permanent tables (OFFSET 0) stay nested loops: they have no other plan.
  -- Restored before every return: the batch's later transactions may take the
  -- per-transaction path.
  nestloop := current_setting('enable_nestloop');
  mergejoin := current_setting('enable_mergejoin');
  PERFORM set_config('enable_nestloop', 'off', true), set_config('enable_mergejoin', 'off', true);
  WITH c AS (
    SELECT s.txn, count(*) FILTER (WHERE s.kind IN ('I', 'U', 'D', 'T'))::int AS n,
           count(*) FILTER (WHERE s.kind = 'M' AND s.prefix = 'synchro.fence')::int AS f
      FROM pg_temp.synchro_stage s
     WHERE s.txn BETWEEN t_first AND t_last
     GROUP BY s.txn),
  ins AS (
    INSERT INTO pg_temp.synchro_b_txn (t, commit_lsn, end_lsn, xid, commit_time, n_events, n_fences)
    SELECT x.i::int - 1, x.c, x.e, x.x, x.ct, coalesce(c.n, 0), coalesce(c.f, 0)
      FROM unnest(commit_lsns, end_lsns, xids, commit_times) WITH ORDINALITY AS x(c, e, x, ct, i)
      LEFT JOIN c ON c.txn = x.i - 1
     WHERE x.i - 1 BETWEEN t_first AND t_last
       AND NOT EXISTS (SELECT 1 FROM synchro.txn d WHERE d.stream_generation = gen AND d.commit_lsn = x.c OFFSET 0)
    RETURNING n_events, n_fences)
  SELECT count(*), coalesce(sum(ins.n_events), 0), coalesce(sum(ins.n_fences), 0) INTO n_new, n_ev, n_fence FROM ins;
  IF n_new = 0 THEN
    PERFORM set_config('enable_nestloop', nestloop, true), set_config('enable_mergejoin', mergejoin, true);
    RETURN array_fill('duplicate'::text, ARRAY[t_last - t_first + 1]);
  END IF;

  -- Serial commit order: each new transaction after the high-watermark and the
  -- processed boundary left by the ones before it.
  IF EXISTS (
    SELECT 1 FROM (
      SELECT b.commit_lsn, b.end_lsn,
             coalesce(lag(b.commit_lsn) OVER w, p.materialized_commit_lsn, p.generation_start_lsn) AS prev_commit,
             greatest(p.processed_end_lsn, max(b.end_lsn) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING))
               AS prev_end
        FROM pg_temp.synchro_b_txn b
      WINDOW w AS (ORDER BY b.t)) x
     WHERE x.commit_lsn <= x.prev_commit OR x.commit_lsn < x.prev_end OR x.end_lsn <= x.commit_lsn) THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'commit order';
  END IF;

  -- Each source transaction's own writes to synchro tables (its push write fences)
  -- are visible: synchro.materialize_batch waited for the whole batch before it
  -- called this (synchro._await_visible_all).

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

  IF n_ev > 1000 THEN
    -- Temp tables have no statistics: without them the pairing join below can be
    -- planned as a nested loop, quadratic in the run's row events. Here and below,
    -- what the plans need is the row counts (their joins are hash joins whatever the
    -- estimates), so only a few narrow columns are analyzed: whole rows (their jsonb
    -- images and arrays included) cost 110-160 ms of a 20,000-event 1,000-row
    -- backlog's ~2,000 ms in materialize_batch (pg_stat_statements).
    ANALYZE pg_temp.synchro_stage (txn, kind);
  END IF;

  -- Row events, each ranked within its row identity in its own transaction and paired
  -- with its fence in the same statement (fence reconciliation inside each
  -- transaction: per row identity, the k-th row event pairs with the fence of the k-th
  -- lowest registered-DML ordinal). The runner staged each fence's fields as typed
  -- columns after checking its MAC: nothing is parsed here.
  --
  -- The planner cannot estimate this join of two derived sets: guessing a few rows, it
  -- chose a nested loop, or a merge join on (txn, relation) alone with the key as a
  -- filter, quadratic in a transaction's rows (1.9 s for one 1,000-row transaction).
  -- A hash join on all four keys is linear (nested loops and merge joins are off: see
  -- the first statement of the run).
  WITH ev AS (
    SELECT x.*, row_number() OVER (PARTITION BY x.t, x.relation_id, x.pk ORDER BY x.seq) AS grp_rank
      FROM (SELECT s.txn AS t, s.seq, s.event_ordinal,
                   CASE s.kind WHEN 'I' THEN 'insert' WHEN 'U' THEN 'update' ELSE 'delete' END AS op,
                   r.relation_id, r.table_id, r.key_column, r.key_type, r.schema_name, r.table_name,
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
                                      new_row, old_pk, grp_rank, fence_id, version)
  SELECT ev.t, ev.seq, ev.event_ordinal, ev.op, ev.relation_id, ev.table_id, ev.key_column, ev.key_type, ev.pk,
         ev.new_row, ev.old_pk, ev.grp_rank, fr.fid, fr.version
    FROM ev
    LEFT JOIN fr
      ON fr.t = ev.t AND fr.rid = ev.relation_id AND fr.k = ev.pk AND fr.rnk = ev.grp_rank
     AND fr.kind = 'synced' AND fr.op = ev.op
     AND fr.sch = ev.schema_name::text AND fr.tbl = ev.table_name::text
     AND fr.tid IS NOT DISTINCT FROM ev.table_id
     AND CASE ev.op
           WHEN 'insert' THEN fr.old_key IS NULL AND fr.new_key = ev.pk
           WHEN 'update' THEN fr.old_key = ev.pk AND fr.new_key = ev.pk
           ELSE fr.old_key = ev.pk AND fr.new_key IS NULL END
     AND fr.version IS NOT NULL AND fr.fid IS NOT NULL;
  GET DIAGNOSTICS n_rows = ROW_COUNT;
  big := n_rows > 1000;
  IF big THEN
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
  -- run's events are written below: that error, like every other one here, makes the
  -- runner re-run the batch through the reference path, which names the class.
  -- No fence pairs twice, with no count of distinct fence ids: both sides are ranked
  -- uniquely within their (transaction, relation, key) group and paired on the rank, so
  -- each row event meets at most one fence and each fence at most one row event; with
  -- every row event paired and as many fences as row events, the pairing is one to one.
  IF EXISTS (SELECT 1 FROM pg_temp.synchro_b_rows w WHERE w.fence_id IS NULL)
     OR n_fence <> n_rows THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'fence reconciliation';
  END IF;

  -- Links: each row's last event in each transaction, numbered along the run, with
  -- its row image rendered once, in the same statement: the registered columns in the
  -- registered shape (synchro._image_sql), as the per-transaction path renders them.
  -- One statement per relation of the run (each has its own image SQL), in a session
  -- function that keeps its plan (synchro._mat_links_fn says why and why it is
  -- safe). The image is measured once there (image_bytes of the projection and the
  -- effects).
  multi := false;
  deletes := false;
  anyknown := false;
  FOR rel IN SELECT DISTINCT w.relation_id FROM pg_temp.synchro_b_rows w LOOP
    EXECUTE format('SELECT x.more, x.gone, x.known FROM %s($1) x', synchro._mat_links_fn(rel.relation_id, reg))
      INTO more, dropped, known USING rel.relation_id;
    multi := multi OR more;
    deletes := deletes OR dropped;
    anyknown := anyknown OR known;
  END LOOP;
  IF n_rows = 0 THEN
    -- No row event, so no links function was made, and the statements below still
    -- name fresh: work tables opened before an upgrade get it here.
    PERFORM synchro._stage_links_fresh();
  END IF;
  IF big THEN
    ANALYZE pg_temp.synchro_b_links (t, relation_id, link);
  END IF;
  -- multi: some row has more than one link (it changed in more than one transaction
  -- of the run; read from the links as they are written, not by another scan). When
  -- none has, the effects below skip the join that finds a link's previous one (a
  -- one-time filter: 14 of the effect statement's 62 ms for a 1,000-row transaction,
  -- which has one link per row).

  -- The memberships the run's rows held before it, read once (each row's first link):
  -- the delete effects of first links, and the membership changes at the end, come
  -- from here instead of probing synchro.membership three times per row. Only this
  -- transaction writes membership (progress is locked), so the ctids stay valid. A
  -- fresh row (synchro._mat_links_fn) had none: not probed.
  INSERT INTO pg_temp.synchro_b_old (relation_id, pk, scope, scope_hash, mctid)
  SELECT l.relation_id, l.pk, m.scope, m.scope_hash, m.ctid
    FROM pg_temp.synchro_b_links l
    CROSS JOIN LATERAL (SELECT m.scope, m.scope_hash, m.ctid FROM synchro.membership m
                         WHERE m.relation_id = l.relation_id AND m.pk = l.pk OFFSET 0) m
   WHERE l.link = 1 AND NOT l.fresh;
  GET DIAGNOSTICS n_old = ROW_COUNT;

  -- Consumer groups (issue 11): the run's per-transaction change record, from the links
  -- and the images rendered with them.
  PERFORM synchro._mat_changes(gen, NULL, NULL);

  -- Projections: the last link of each row decides. A statement with nothing to do
  -- is not run (deletes: a last link deletes its row; n_old: a row of the run had
  -- memberships): a small batch's fixed cost is its ~40 statements' executor start-up,
  -- 30-80 us each however few rows they touch (pg_stat_statements, one transaction
  -- per batch), and these two were 130 us of an insert batch's ~2 ms.
  IF deletes THEN
    DELETE FROM synchro.projection pr
     WHERE pr.ctid = ANY (ARRAY(
       SELECT x.ctid FROM pg_temp.synchro_b_links l
        CROSS JOIN LATERAL (SELECT p2.ctid FROM synchro.projection p2
                             WHERE p2.relation_id = l.relation_id AND p2.pk = l.pk OFFSET 0) x
        WHERE l.last AND l.op = 'delete'));
  END IF;
  -- Fresh rows (synchro._mat_links_fn) are new: a plain INSERT. ON CONFLICT inserted
  -- each speculatively, one more WAL record per row (the confirmation) that the
  -- runner's own walsender decodes too, and probed the index first. A projection row
  -- there anyway is a unique violation: the runner re-runs the batch through the
  -- reference path, which upserts (and that is also what catches a membership or rule
  -- value the probes below skip for fresh rows: they exist only with a projection).
  INSERT INTO synchro.projection (relation_id, pk, pk_int, version, image, image_bytes)
  SELECT l.relation_id, l.pk, l.pk_int, l.version, l.image, l.image_bytes FROM pg_temp.synchro_b_links l
   WHERE l.fresh;
  IF anyknown THEN
    INSERT INTO synchro.projection AS pr (relation_id, pk, pk_int, version, image, image_bytes)
    SELECT l.relation_id, l.pk, l.pk_int, l.version, l.image, l.image_bytes FROM pg_temp.synchro_b_links l
     WHERE l.last AND l.op <> 'delete' AND NOT l.fresh
    ON CONFLICT (relation_id, pk) DO UPDATE
      SET version = excluded.version, image = excluded.image, image_bytes = excluded.image_bytes;
  END IF;

  -- Rule values (the columns synchro._rule_value_columns names) as the last link
  -- leaves them; a value that did not change is neither deleted nor written again. A
  -- run whose tables have direct rules only has nothing to index.
  IF EXISTS (SELECT 1 FROM synchro._rule_value_columns(reg) c
              WHERE c.relation_id IN (SELECT DISTINCT l.relation_id FROM pg_temp.synchro_b_links l)) THEN
    DELETE FROM synchro.rule_value v
     WHERE v.ctid = ANY (ARRAY(
       SELECT x.ctid FROM pg_temp.synchro_b_links l
        CROSS JOIN LATERAL (SELECT v2.ctid, v2.column_name, v2.value FROM synchro.rule_value v2
                             WHERE v2.relation_id = l.relation_id AND v2.pk = l.pk OFFSET 0) x
        WHERE l.last AND NOT l.fresh
          AND (l.op = 'delete' OR l.image ->> x.column_name::text IS DISTINCT FROM x.value)));
    INSERT INTO synchro.rule_value (relation_id, column_name, value, pk)
    SELECT DISTINCT l.relation_id, c.column_name, l.image ->> c.column_name::text, l.pk
      FROM pg_temp.synchro_b_links l
      JOIN synchro._rule_value_columns(reg) c ON c.relation_id = l.relation_id
     WHERE l.last AND l.op <> 'delete' AND l.image ->> c.column_name::text IS NOT NULL
    ON CONFLICT DO NOTHING;
  END IF;

  -- Each link's scopes under the generation's rules, from its own image (direct
  -- rules) and the unchanged dependency projections (via rules), each with its hash,
  -- computed here once for the effects and the memberships that store it (hashing
  -- each distinct scope once and joining it back cost more than hashing every row).
  WITH vals AS MATERIALIZED (
    SELECT l.t, l.relation_id, l.pk, r.scope_prefix, r.via_relation_id, r.via_match, r.via_scope,
           l.image ->> r.column_name::text AS value
      FROM pg_temp.synchro_b_links l
      JOIN synchro.scope_rule r ON r.generation = reg AND r.relation_id = l.relation_id
     WHERE l.op <> 'delete' AND l.image ->> r.column_name::text IS NOT NULL),
  sc AS (
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || x.value AS scope
      FROM vals x
     WHERE x.via_relation_id IS NULL
    UNION
    SELECT x.t, x.relation_id, x.pk, x.scope_prefix || s.value
      FROM vals x
      CROSS JOIN LATERAL synchro._via_scope_values(x.via_relation_id, x.via_match, x.via_scope, x.value) AS s(value)
     WHERE x.via_relation_id IS NOT NULL)
  INSERT INTO pg_temp.synchro_b_scopes (t, relation_id, pk, scope, scope_hash)
  SELECT sc.t, sc.relation_id, sc.pk, sc.scope, synchro._scope_hash(sc.scope) FROM sc;
  IF big THEN
    ANALYZE pg_temp.synchro_b_scopes (t, relation_id);
  END IF;

  -- Net pull effects per link: upsert in every scope the row is in after the link (it
  -- was touched), delete in every scope it was in before and is not after.
  -- effect_ordinal counts within (scope, event) in canonical (table_id, typed key,
  -- operation) order, as the per-transaction path does; in a run it is always 0, with
  -- no sort to find it: a run has no dependency events, so an event's effects are
  -- those of its own row (its link: each link is one row's last event in one
  -- transaction, and event ordinals are unique within a transaction), and a row gets
  -- at most one effect per scope there (an upsert when it is in the scope after the
  -- link, else a delete when it was in it before: b_scopes and the memberships are
  -- unique per row and scope). The batch-invariant tests compare this with the
  -- per-transaction path's ordinals.
  WITH before AS (
    SELECT l.t, l.relation_id, l.pk, s.scope, s.scope_hash
      FROM pg_temp.synchro_b_links l
      JOIN pg_temp.synchro_b_links pl ON pl.relation_id = l.relation_id AND pl.pk = l.pk AND pl.link = l.link - 1
      JOIN pg_temp.synchro_b_scopes s ON s.relation_id = pl.relation_id AND s.pk = pl.pk AND s.t = pl.t
     WHERE multi AND l.link > 1
    UNION ALL
    SELECT l.t, l.relation_id, l.pk, o.scope, o.scope_hash
      FROM pg_temp.synchro_b_links l
      JOIN pg_temp.synchro_b_old o ON o.relation_id = l.relation_id AND o.pk = l.pk
     WHERE l.link = 1),
  e AS (
    SELECT n.scope, n.scope_hash, n.t, n.relation_id, n.pk, 'upsert' AS op FROM pg_temp.synchro_b_scopes n
    UNION ALL
    SELECT o.scope, o.scope_hash, o.t, o.relation_id, o.pk, 'delete' FROM before o
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                        WHERE n.relation_id = o.relation_id AND n.pk = o.pk AND n.t = o.t AND n.scope = o.scope))
  INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
                              table_id, relation_id, pk, op, version, image, image_bytes)
  SELECT gen, e.scope, e.scope_hash, b.commit_lsn, l.event_ordinal, 0,
         l.table_id, e.relation_id, e.pk, e.op,
         CASE WHEN e.op = 'upsert' THEN l.version END,
         CASE WHEN e.op = 'upsert' THEN l.image END,
         CASE WHEN e.op = 'upsert' THEN l.image_bytes END
    FROM e
    JOIN pg_temp.synchro_b_links l ON l.relation_id = e.relation_id AND l.pk = e.pk AND l.t = e.t
    JOIN pg_temp.synchro_b_txn b ON b.t = e.t;

  -- Membership as the last link leaves it: memberships that ended, then new ones.
  IF n_old > 0 THEN
    DELETE FROM synchro.membership m
     WHERE m.ctid = ANY (ARRAY(
       SELECT o.mctid FROM pg_temp.synchro_b_old o
         JOIN pg_temp.synchro_b_links l ON l.relation_id = o.relation_id AND l.pk = o.pk AND l.last
        WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_scopes n
                           WHERE n.relation_id = l.relation_id AND n.pk = l.pk AND n.t = l.t AND n.scope = o.scope)));
  END IF;
  INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
  SELECT n.scope, n.scope_hash, n.relation_id, n.pk, l.table_id, coalesce(l.pk_int, 0)
    FROM pg_temp.synchro_b_links l
    JOIN pg_temp.synchro_b_scopes n ON n.relation_id = l.relation_id AND n.pk = l.pk AND n.t = l.t
   WHERE l.last
     AND NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_old o
                      WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.scope = n.scope);

  -- Write-fence reconciliation: exactly these fences are now WAL-materialized.
  UPDATE synchro.write_fence wf SET coverage = 'wal', covered_at = now()
   WHERE wf.fence_id = ANY (ARRAY(SELECT w.fence_id FROM pg_temp.synchro_b_rows w)) AND wf.coverage IS NULL;

  -- Replay identities and the transaction-end high-watermark.
  INSERT INTO synchro.txn (stream_generation, commit_lsn, end_lsn, xid, commit_time, event_count)
  SELECT gen, b.commit_lsn, b.end_lsn, b.xid, b.commit_time, b.n_events FROM pg_temp.synchro_b_txn b;
  INSERT INTO synchro.event (stream_generation, commit_lsn, event_ordinal, relation_id, op, pk, version, fence_id,
                             registry_generation)
  SELECT gen, b.commit_lsn, w.event_ordinal, w.relation_id, w.op, w.pk, w.version, w.fence_id, reg
    FROM pg_temp.synchro_b_rows w JOIN pg_temp.synchro_b_txn b ON b.t = w.t;
  UPDATE synchro.progress
     SET materialized_commit_lsn = (SELECT b.commit_lsn FROM pg_temp.synchro_b_txn b ORDER BY b.t DESC LIMIT 1),
         processed_end_lsn = greatest(processed_end_lsn, (SELECT max(b.end_lsn) FROM pg_temp.synchro_b_txn b)),
         updated_at = now();
  UPDATE synchro.quarantine q SET resolved_at = now(), retry_requested = false
   WHERE q.stream_generation = gen AND q.resolved_at IS NULL
     AND q.commit_lsn = ANY (ARRAY(SELECT b.commit_lsn FROM pg_temp.synchro_b_txn b));

  IF n_new = t_last - t_first + 1 THEN
    -- No replayed transaction in the run: the common case, without a query.
    outcomes := array_fill('materialized'::text, ARRAY[n_new]);
  ELSE
    outcomes := ARRAY(SELECT CASE WHEN b.t IS NULL THEN 'duplicate' ELSE 'materialized' END
                        FROM generate_series(t_first, t_last) g(t)
                        LEFT JOIN pg_temp.synchro_b_txn b ON b.t = g.t
                       ORDER BY g.t);
  END IF;
  -- Empty for the next run of this batch or of a later one (synchro._stage_reset
  -- empties only the stage table, and truncates these with it when their dead space
  -- grows: it says why rows are deleted, not truncated).
  DELETE FROM pg_temp.synchro_b_txn;
  DELETE FROM pg_temp.synchro_b_rows;
  DELETE FROM pg_temp.synchro_b_links;
  DELETE FROM pg_temp.synchro_b_scopes;
  DELETE FROM pg_temp.synchro_b_old;
  PERFORM set_config('enable_nestloop', nestloop, true), set_config('enable_mergejoin', mergejoin, true);
  RETURN outcomes;
END
$$;

REVOKE ALL ON FUNCTION synchro._materialize_run(int, int, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) FROM PUBLIC;

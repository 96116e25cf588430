-- Fail-closed readiness (CONTRACT.md "Readiness", ADR 001 "Readiness"): always the
-- eleven rows, in the contract's order, each deciding one condition. Missing, NULL,
-- stale, inconsistent or unbounded data is not ready. detail carries the figures that
-- decided the row (counts, LSNs, ages, limits, relation ids), never row values.
-- docs/sql/readiness.md describes every row.
--
-- The body of synchro.readiness() and synchro.ready(). with_groups: also list each
-- consumer group's lag in the progress row's detail (readiness() does; ready(), which
-- probes call, does not: the checks are the same, and a probe never pays for, or waits
-- on, the groups' change record). Internal: called only from those two, which pinned
-- search_path and run as the pack's owner.
--
-- The registry-dependent checks (registry, triggers, publication) each read the active
-- generation in the one statement that compares it with the catalog: read once at the
-- start, it was compared with a publication or triggers read later (a newer snapshot
-- each statement), and an activation committed in between read as drift (publication
-- extra=1 on a healthy stream: TestOperateEdgeReadinessTornAcrossActivation). The body
-- stays VOLATILE: the slot comparisons depend on reading progress again after the slot.
CREATE OR REPLACE FUNCTION synchro._readiness(with_groups boolean)
RETURNS TABLE (check_name text, ok boolean, detail text)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rn synchro.runner;
  sg synchro.stream_generation;
  pr synchro.progress;
  lim synchro.readiness_limit;
  have_runner boolean;
  have_stream boolean;
  have_progress boolean;
  have_limits boolean;
  ts timestamptz;
  wal pg_lsn;
  ack pg_lsn;
  ack_before pg_lsn;
  have_slot boolean := false;
  mat pg_lsn;
  reg_gen bigint;
  reg_activated timestamptz;
  n_rel bigint;
  n_bad bigint;
  first_bad text;
  lock_key bigint;
  claim_held boolean;
  backend_alive boolean;
  age interval;
  lim_ok boolean;
  pub text;
  pubrow pg_catalog.pg_publication;
  n_pub bigint;
  n_missing bigint;
  n_extra bigint;
  n_filtered bigint;
  n_schemas bigint;
  slot record;
  n_poison bigint;
  poison record;
  lag numeric;
  basis text;
  n_groups bigint;
  group_lags text;
BEGIN
  SELECT * INTO rn FROM synchro.runner;
  have_runner := FOUND;
  SELECT * INTO sg FROM synchro.stream_generation g WHERE g.state = 'active';
  have_stream := FOUND;
  SELECT * INTO lim FROM synchro.readiness_limit;
  have_limits := FOUND;
  -- The order of these reads makes the slot comparisons race-free (each statement
  -- sees the latest commits; the slot view is live): the acknowledgement is recorded
  -- only after the slot showed it, so it is read before the slot; the slot is told
  -- only a boundary already durable, so progress is read again after the slot; the
  -- current WAL position last, so it is at or after everything read before.
  SELECT coalesce(p.acknowledged_end_lsn, p.generation_start_lsn) INTO ack_before FROM synchro.progress p;
  IF have_stream THEN
    SELECT s.plugin, s.slot_type, s.temporary, s.wal_status, s.confirmed_flush_lsn,
           s.database = pg_catalog.current_database() AS same_database,
           -- Retained WAL against max_slot_wal_keep_size (-1: unlimited) and what
           -- may still be written before the slot starts losing WAL (NULL: unlimited; 0
           -- once lost).
           CASE WHEN s.restart_lsn IS NOT NULL AND NOT pg_catalog.pg_is_in_recovery()
                THEN (pg_catalog.pg_current_wal_lsn() OPERATOR(pg_catalog.-) s.restart_lsn)::int8 END AS retained_bytes,
           -- safe_wal_size is NULL for a lost slot too: it has nothing left (0).
           CASE WHEN s.wal_status = 'lost' THEN 0 ELSE s.safe_wal_size END AS safe_bytes,
           (SELECT CASE WHEN st.setting::int8 < 0 THEN -1 ELSE st.setting::int8 * 1048576 END
              FROM pg_catalog.pg_settings st WHERE st.name = 'max_slot_wal_keep_size') AS max_keep_bytes
      INTO slot
      FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = sg.slot_name;
    have_slot := FOUND;
  END IF;
  SELECT * INTO pr FROM synchro.progress;
  have_progress := FOUND;
  IF NOT pg_catalog.pg_is_in_recovery() THEN
    wal := pg_catalog.pg_current_wal_insert_lsn();
  END IF;
  -- After every read: a heartbeat or WAL mark read above is never in its future.
  ts := pg_catalog.clock_timestamp();
  IF have_progress THEN
    ack := coalesce(pr.acknowledged_end_lsn, pr.generation_start_lsn);
    mat := coalesce(pr.materialized_commit_lsn, pr.generation_start_lsn);
  END IF;
  SELECT g.generation, g.activated_at INTO reg_gen, reg_activated
    FROM synchro.registry_generation g WHERE g.state = 'active';

  -- database: the runner (and the stream) recorded this very database.
  check_name := 'database';
  IF NOT have_runner THEN
    ok := false;
    detail := 'no runner has recorded its database';
  ELSE
    ok := rn.database_name = pg_catalog.current_database()
          AND (NOT have_stream OR sg.database_name = pg_catalog.current_database());
    detail := pg_catalog.format('runner_database_matches=%s stream_database_matches=%s',
                (rn.database_name = pg_catalog.current_database())::text,
                CASE WHEN have_stream THEN (sg.database_name = pg_catalog.current_database())::text ELSE 'no_stream' END);
  END IF;
  RETURN NEXT;

  -- worker: a runner row in a running state whose backend is alive in this database and
  -- holds the claim (the session-level advisory lock of runner_claim).
  check_name := 'worker';
  IF NOT have_runner THEN
    ok := false;
    detail := 'no runner has started';
  ELSE
    lock_key := pg_catalog.hashtextextended('synchro.runner', synchro._lock_seed());
    claim_held := EXISTS (
      SELECT 1 FROM pg_catalog.pg_locks l
       WHERE l.locktype = 'advisory' AND l.granted AND l.pid = rn.backend_pid
         AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())
         AND l.classid = ((lock_key >> 32) & 4294967295)::oid
         AND l.objid = (lock_key & 4294967295)::oid
         AND l.objsubid = 1);
    backend_alive := EXISTS (
      SELECT 1 FROM pg_catalog.pg_stat_activity a
       WHERE a.pid = rn.backend_pid AND a.datname = pg_catalog.current_database());
    -- bootstrapping: the runner stages a projection bootstrap beside the stream, which
    -- goes on up to the activation (docs/runbook.md: readiness stays ok throughout).
    ok := rn.state IN ('streaming', 'poisoned', 'bootstrapping') AND claim_held AND backend_alive;
    detail := pg_catalog.format('state=%s claim_held=%s backend_alive=%s', rn.state, claim_held::text, backend_alive::text);
  END IF;
  RETURN NEXT;

  -- heartbeat: age of the runner's last heartbeat within the finite, positive limit.
  check_name := 'heartbeat';
  lim_ok := have_limits AND lim.heartbeat IS NOT NULL AND pg_catalog.isfinite(lim.heartbeat)
            AND lim.heartbeat > interval '0';
  IF NOT have_runner THEN
    ok := false;
    detail := pg_catalog.format('no runner has started limit_s=%s', CASE WHEN lim_ok THEN
                pg_catalog.round(extract(epoch FROM lim.heartbeat), 3)::text ELSE 'invalid' END);
  ELSE
    age := ts - rn.heartbeat_at;
    ok := lim_ok AND age >= interval '0' AND age <= lim.heartbeat;
    detail := pg_catalog.format('age_s=%s limit_s=%s interval_s=%s',
                pg_catalog.round(extract(epoch FROM age), 3),
                CASE WHEN lim_ok THEN pg_catalog.round(extract(epoch FROM lim.heartbeat), 3)::text ELSE 'invalid' END,
                pg_catalog.round(extract(epoch FROM rn.heartbeat_interval), 3));
  END IF;
  RETURN NEXT;

  -- registry: the active generation is committed and was activated (validated), and
  -- every registration matches the live catalog: same relation OID, qualified name,
  -- ordinary logged table with REPLICA IDENTITY DEFAULT, key column and type, registered
  -- columns with their registered types.
  check_name := 'registry';
  IF reg_gen IS NULL OR reg_activated IS NULL THEN
    ok := false;
    detail := 'no active registry generation';
  ELSE
    SELECT pg_catalog.count(*), pg_catalog.count(d.reason),
           pg_catalog.min(pg_catalog.format('relation_id %s %s', d.relation_id, d.reason)) FILTER (WHERE d.reason IS NOT NULL),
           coalesce(pg_catalog.max(d.generation), reg_gen)
      INTO n_rel, n_bad, first_bad, reg_gen
      FROM (
        SELECT rel.relation_id, reg.generation,
               CASE
                 WHEN c.oid IS NULL THEN 'relation_missing'
                 WHEN n.nspname <> rel.schema_name OR c.relname <> rel.table_name THEN 'renamed'
                 WHEN c.relkind <> 'r' OR c.relpersistence <> 'p' OR c.relispartition THEN 'relation_kind'
                 WHEN c.relreplident <> 'd' THEN 'replica_identity'
                 WHEN NOT EXISTS (
                   SELECT 1 FROM pg_catalog.pg_constraint con
                     JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = con.conkey[1]
                     JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
                    WHERE con.conrelid = c.oid AND con.contype = 'p' AND pg_catalog.cardinality(con.conkey) = 1
                      AND NOT con.condeferrable AND a.attname = rel.key_column
                      AND t.typnamespace = 'pg_catalog'::regnamespace AND t.typname::text = rel.key_pg_type) THEN 'key'
                 WHEN reg.column_types IS NULL
                      OR pg_catalog.cardinality(reg.column_types) <> pg_catalog.cardinality(reg.columns) THEN 'column_types_unknown'
                 WHEN EXISTS (
                   SELECT 1 FROM unnest(reg.columns, reg.column_types) AS x(col, typ)
                    WHERE NOT EXISTS (
                      SELECT 1 FROM pg_catalog.pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = x.col AND a.attnum > 0 AND NOT a.attisdropped
                         AND a.atttypid = x.typ)) THEN 'columns'
                 -- dropped and added again under the same name and type: the values
                 -- of every row are gone, and no row event said so
                 WHEN reg.column_attnums IS NOT NULL AND EXISTS (
                   SELECT 1 FROM unnest(reg.columns, reg.column_attnums) AS x(col, num)
                    WHERE NOT EXISTS (
                      SELECT 1 FROM pg_catalog.pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = x.col AND a.attnum = x.num AND NOT a.attisdropped)) THEN 'columns'
                 -- a via rule of the relation whose two columns no longer compare by
                 -- their text (a nondeterministic collation given to one of them, the
                 -- same type: no other check sees it): the rule matches nothing equal
                 -- in another spelling
                 WHEN EXISTS (
                   SELECT 1 FROM synchro.scope_rule s
                     JOIN synchro.relation sr ON sr.relation_id = s.relation_id
                     JOIN synchro.relation sv ON sv.relation_id = s.via_relation_id
                    WHERE s.generation = reg.generation AND rel.relation_id IN (s.relation_id, s.via_relation_id)
                      AND NOT synchro._via_match_comparable(sr.relid, s.column_name, sv.relid, s.via_match)) THEN 'rule_columns'
               END AS reason
          FROM synchro.registration reg
          JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
          LEFT JOIN pg_catalog.pg_class c ON c.oid = rel.relid
          LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE reg.generation = (SELECT ag.generation FROM synchro.registry_generation ag WHERE ag.state = 'active')) d;
    ok := n_bad = 0;
    detail := pg_catalog.format('generation=%s relations=%s drifted=%s', reg_gen, n_rel, n_bad)
              || coalesce(' first=' || first_bad, '');
  END IF;
  RETURN NEXT;

  -- triggers: every registered relation has its five triggers, enabled (origin or
  -- always), calling the pack's function, with the installed timing and events.
  check_name := 'triggers';
  IF reg_gen IS NULL THEN
    ok := false;
    detail := 'no active registry generation';
  ELSE
    SELECT pg_catalog.count(*), pg_catalog.count(d.reason),
           pg_catalog.min(pg_catalog.format('relation_id %s %s %s', d.relation_id, d.name, d.reason)) FILTER (WHERE d.reason IS NOT NULL)
      INTO n_rel, n_bad, first_bad
      FROM (
        SELECT rel.relation_id, e.name,
               CASE
                 WHEN t.oid IS NULL THEN 'missing'
                 WHEN t.tgenabled NOT IN ('O', 'A') THEN 'disabled'
                 WHEN e.fn IS NULL OR t.tgfoid IS DISTINCT FROM e.fn OR t.tgtype <> e.typ THEN 'altered'
                 WHEN e.name LIKE 'synchro_fence_%' AND (t.tgqual IS NOT NULL OR t.tgattr::text <> '') THEN 'altered'
               END AS reason
          FROM synchro.registration reg
          JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
         CROSS JOIN LATERAL (VALUES
           -- tgtype bits: 1 row, 2 before, 4 insert, 8 delete, 16 update, 32 truncate.
           ('synchro_guard_key'::text, 19::int2, pg_catalog.to_regprocedure('synchro._refuse_key_change()')::oid),
           ('synchro_guard_truncate', 34::int2, pg_catalog.to_regprocedure('synchro._refuse_truncate()')::oid),
           ('synchro_fence_insert', 5::int2, pg_catalog.to_regprocedure(pg_catalog.format('synchro._fence_%s()', rel.relation_id))::oid),
           ('synchro_fence_update', 17::int2, pg_catalog.to_regprocedure(pg_catalog.format('synchro._fence_%s()', rel.relation_id))::oid),
           ('synchro_fence_delete', 9::int2, pg_catalog.to_regprocedure(pg_catalog.format('synchro._fence_%s()', rel.relation_id))::oid)
         ) AS e(name, typ, fn)
          LEFT JOIN pg_catalog.pg_trigger t ON t.tgrelid = rel.relid AND t.tgname = e.name
         WHERE reg.generation = (SELECT ag.generation FROM synchro.registry_generation ag WHERE ag.state = 'active')) d;
    ok := n_bad = 0;
    detail := pg_catalog.format('relations=%s triggers=%s failing=%s', n_rel / 5, n_rel, n_bad)
              || coalesce(' first=' || first_bad, '');
  END IF;
  RETURN NEXT;

  -- publication: the configured publication publishes exactly the registered relations
  -- (no schema entries, row filters or column lists), every operation, not via root.
  check_name := 'publication';
  SELECT s.value INTO pub FROM synchro.setting s WHERE s.name = 'publication';
  SELECT * INTO pubrow FROM pg_catalog.pg_publication p WHERE p.pubname = pub;
  IF pub IS NULL OR NOT FOUND THEN
    ok := false;
    detail := 'publication missing';
  ELSIF reg_gen IS NULL THEN
    ok := false;
    detail := 'no active registry generation';
  ELSE
    SELECT pg_catalog.count(*) INTO n_pub FROM pg_catalog.pg_publication_rel pr2 WHERE pr2.prpubid = pubrow.oid;
    SELECT pg_catalog.count(*) INTO n_missing
      FROM synchro.registration reg JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
     WHERE reg.generation = (SELECT ag.generation FROM synchro.registry_generation ag WHERE ag.state = 'active')
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel pr2 WHERE pr2.prpubid = pubrow.oid AND pr2.prrelid = rel.relid);
    SELECT pg_catalog.count(*) INTO n_extra
      FROM pg_catalog.pg_publication_rel pr2
     WHERE pr2.prpubid = pubrow.oid
       AND NOT EXISTS (SELECT 1 FROM synchro.registration reg JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
                        WHERE reg.generation = (SELECT ag.generation FROM synchro.registry_generation ag WHERE ag.state = 'active') AND rel.relid = pr2.prrelid);
    SELECT pg_catalog.count(*) INTO n_filtered
      FROM pg_catalog.pg_publication_rel pr2
     WHERE pr2.prpubid = pubrow.oid AND (pr2.prqual IS NOT NULL OR pr2.prattrs IS NOT NULL);
    SELECT pg_catalog.count(*) INTO n_schemas FROM pg_catalog.pg_publication_namespace pn WHERE pn.pnpubid = pubrow.oid;
    ok := n_missing = 0 AND n_extra = 0 AND n_filtered = 0 AND n_schemas = 0
          AND NOT pubrow.puballtables AND pubrow.pubinsert AND pubrow.pubupdate AND pubrow.pubdelete
          AND pubrow.pubtruncate AND NOT pubrow.pubviaroot
          AND (NOT have_runner OR rn.publication = pub);
    detail := pg_catalog.format(
      'published=%s missing=%s extra=%s filtered=%s schemas=%s all_tables=%s operations_ok=%s runner_publication_matches=%s',
      n_pub, n_missing, n_extra, n_filtered, n_schemas, pubrow.puballtables::text,
      (pubrow.pubinsert AND pubrow.pubupdate AND pubrow.pubdelete AND pubrow.pubtruncate AND NOT pubrow.pubviaroot)::text,
      CASE WHEN have_runner THEN (rn.publication = pub)::text ELSE 'no_runner' END);
  END IF;
  RETURN NEXT;

  -- slot: the stream's slot exists in this database with the stream's plugin (and the
  -- runner decodes with that plugin: synchro run --decoder), its WAL
  -- not lost, confirmed_flush_lsn between the acknowledgement and both the processed
  -- boundary and the current WAL position.
  check_name := 'slot';
  IF NOT have_stream THEN
    ok := false;
    detail := 'no stream generation (no runner has created the slot)';
  ELSE
    IF NOT have_slot THEN
      ok := false;
      detail := 'slot missing';
    ELSE
      ok := slot.slot_type = 'logical' AND slot.same_database AND NOT slot.temporary
            AND slot.plugin = sg.plugin
            -- unreserved: past max_slot_wal_keep_size, lost at the next checkpoint
            AND slot.wal_status IS NOT NULL AND slot.wal_status NOT IN ('lost', 'unreserved')
            AND slot.confirmed_flush_lsn IS NOT NULL AND have_progress AND wal IS NOT NULL
            AND ack_before IS NOT NULL AND slot.confirmed_flush_lsn >= ack_before AND slot.confirmed_flush_lsn <= pr.processed_end_lsn
            AND slot.confirmed_flush_lsn <= wal
            AND (NOT have_runner OR rn.slot_name = sg.slot_name)
            AND (NOT have_runner OR rn.decoder = sg.plugin);
      ok := coalesce(ok, false);
      detail := pg_catalog.format(
        'plugin_matches=%s wal_status=%s confirmed_flush_lsn=%s acknowledged_lsn=%s processed_end_lsn=%s current_wal_lsn=%s runner_slot_matches=%s runner_decoder_matches=%s'
        ' retained_wal_bytes=%s max_slot_wal_keep_bytes=%s safe_wal_bytes=%s',
        (slot.plugin = sg.plugin)::text, coalesce(slot.wal_status, 'null'), coalesce(slot.confirmed_flush_lsn::text, 'null'),
        coalesce(ack_before::text, 'null'), coalesce(pr.processed_end_lsn::text, 'null'), coalesce(wal::text, 'unknown'),
        CASE WHEN have_runner THEN (rn.slot_name = sg.slot_name)::text ELSE 'no_runner' END,
        CASE WHEN have_runner THEN coalesce((rn.decoder = sg.plugin)::text, 'unknown') ELSE 'no_runner' END,
        coalesce(slot.retained_bytes::text, 'unknown'), coalesce(slot.max_keep_bytes::text, 'unknown'),
        coalesce(slot.safe_bytes::text, 'unlimited'));
    END IF;
  END IF;
  RETURN NEXT;

  -- poison: no unresolved quarantine record of the active stream.
  check_name := 'poison';
  SELECT pg_catalog.count(*) INTO n_poison
    FROM synchro.quarantine q
   WHERE q.resolved_at IS NULL AND (NOT have_stream OR q.stream_generation = sg.stream_generation);
  SELECT q.commit_lsn, q.failure_class, q.retry_requested INTO poison
    FROM synchro.quarantine q
   WHERE q.resolved_at IS NULL AND (NOT have_stream OR q.stream_generation = sg.stream_generation)
   ORDER BY q.stream_generation, q.commit_lsn LIMIT 1;
  ok := n_poison = 0;
  detail := pg_catalog.format('unresolved=%s', n_poison)
            || CASE WHEN n_poison > 0 THEN pg_catalog.format(' first_commit_lsn=%s class=%s retry_requested=%s',
                                                             poison.commit_lsn, poison.failure_class, poison.retry_requested::text)
                    ELSE '' END;
  RETURN NEXT;

  -- progress: durable progress of the active stream with generation_start <= ack <=
  -- processed and generation_start <= materialized <= processed; the runner's heartbeat
  -- copies at or before it.
  check_name := 'progress';
  IF NOT have_stream OR NOT have_progress THEN
    ok := false;
    detail := 'no durable progress (no stream generation)';
  ELSE
    ok := pr.stream_generation = sg.stream_generation AND pr.generation_start_lsn = sg.generation_start_lsn
          AND pr.generation_start_lsn <= ack AND ack <= pr.processed_end_lsn
          AND pr.generation_start_lsn <= mat AND mat <= pr.processed_end_lsn
          AND (NOT have_runner OR rn.materialized_commit_lsn IS NULL OR rn.materialized_commit_lsn <= mat)
          AND (NOT have_runner OR rn.registry_generation IS NULL
               OR rn.registry_generation <= coalesce(pr.registry_generation, 0))
          AND (pr.registry_generation IS NULL OR reg_gen IS NULL OR pr.registry_generation <= reg_gen);
    ok := coalesce(ok, false);
    detail := pg_catalog.format(
      'stream_generation=%s generation_start_lsn=%s acknowledged_lsn=%s processed_end_lsn=%s materialized_commit_lsn=%s',
      pr.stream_generation, pr.generation_start_lsn, ack, pr.processed_end_lsn, mat);
  END IF;
  -- Each consumer group's lag, reported here but deciding nothing: a group holds back
  -- only its own change record (compact), never the slot or pull, so a slow indexer
  -- must not take the sync path out of service (alert on
  -- synchro_consumer_group_lag_* in /metrics instead). Bounded text: at most ten groups
  -- are listed (the most behind first, groups_not_listed counts the rest). Bounded
  -- count: a group's transactions are counted up to 10,000 ("10000+"), so the count
  -- stops early on a large backlog instead of scanning it on every probe. The age is
  -- the oldest unacknowledged change's commit time (one index probe).
  IF with_groups THEN
    SELECT pg_catalog.count(*) INTO n_groups FROM synchro.consumer_group_state cg WHERE cg.removed_at IS NULL;
  END IF;
  IF with_groups AND n_groups > 0 THEN
    SELECT pg_catalog.string_agg(pg_catalog.format('%s:%s:%s', x.name,
             CASE WHEN x.txns > 10000 THEN '10000+' ELSE x.txns::text END,
             pg_catalog.round(x.age_s, 3)), ',' ORDER BY x.age_s DESC, x.name)
      INTO group_lags
      FROM (
        SELECT cg.name, t.txns,
               greatest(coalesce(extract(epoch FROM ts - o.oldest), 0), 0) AS age_s
          FROM synchro.consumer_group_state cg
         CROSS JOIN LATERAL (
           SELECT coalesce(cg.stream_generation, pr.stream_generation) AS gen,
                  coalesce(cg.checkpoint_lsn, pr.generation_start_lsn) AS cp) pos
         CROSS JOIN LATERAL (
           SELECT pg_catalog.count(*) AS txns FROM (
             SELECT DISTINCT c.commit_lsn FROM synchro.change c
              WHERE c.stream_generation = pos.gen AND c.commit_lsn > pos.cp
                AND (cg.table_ids IS NULL OR c.table_id = ANY (cg.table_ids))
              ORDER BY c.commit_lsn LIMIT 10001) d) t
          LEFT JOIN LATERAL (
           SELECT c.commit_time AS oldest FROM synchro.change c
            WHERE c.stream_generation = pos.gen AND c.commit_lsn > pos.cp
              AND (cg.table_ids IS NULL OR c.table_id = ANY (cg.table_ids))
            ORDER BY c.stream_generation, c.commit_lsn LIMIT 1) o ON true
         WHERE cg.removed_at IS NULL
         ORDER BY age_s DESC, cg.name
         LIMIT 10) x;
    detail := detail || pg_catalog.format(' consumer_groups=%s group_lag=%s', n_groups, group_lags)
              || CASE WHEN n_groups > 10 THEN pg_catalog.format(' groups_not_listed=%s', n_groups - 10) ELSE '' END;
  END IF;
  RETURN NEXT;

  -- wal_lag: bytes of WAL after the processed boundary, within the limit.
  check_name := 'wal_lag';
  lim_ok := have_limits AND lim.wal_lag_bytes IS NOT NULL AND lim.wal_lag_bytes > 0;
  IF NOT have_progress OR wal IS NULL THEN
    ok := false;
    detail := pg_catalog.format('unknown (%s) limit_bytes=%s',
                CASE WHEN wal IS NULL THEN 'in recovery' ELSE 'no durable progress' END,
                CASE WHEN lim_ok THEN lim.wal_lag_bytes::text ELSE 'invalid' END);
  ELSE
    lag := wal - pr.processed_end_lsn;
    ok := lim_ok AND lag >= 0 AND lag <= lim.wal_lag_bytes;
    detail := pg_catalog.format('bytes=%s limit_bytes=%s', lag,
                CASE WHEN lim_ok THEN lim.wal_lag_bytes::text ELSE 'invalid' END);
  END IF;
  RETURN NEXT;

  -- commit_lag: an upper bound of the age of the oldest source commit not yet
  -- materialized. 0 when the processed boundary is at the current WAL position;
  -- otherwise the time since the newest WAL mark at or before the processed boundary
  -- (every unmaterialized commit lies at or after the boundary, so it was written after
  -- that mark). Unknown (not ready) without such a mark.
  check_name := 'commit_lag';
  lim_ok := have_limits AND lim.commit_lag IS NOT NULL AND pg_catalog.isfinite(lim.commit_lag)
            AND lim.commit_lag > interval '0';
  lag := NULL;
  basis := 'unknown';
  IF have_progress AND wal IS NOT NULL THEN
    IF pr.processed_end_lsn >= wal THEN
      lag := 0;
      basis := 'caught_up';
    ELSIF have_runner AND rn.wal_mark_lsn IS NOT NULL AND rn.wal_mark_lsn <= pr.processed_end_lsn THEN
      lag := extract(epoch FROM ts - rn.wal_mark_at);
      basis := 'mark';
    ELSIF have_runner AND rn.wal_prev_mark_lsn IS NOT NULL AND rn.wal_prev_mark_lsn <= pr.processed_end_lsn THEN
      lag := extract(epoch FROM ts - rn.wal_prev_mark_at);
      basis := 'previous_mark';
    END IF;
  END IF;
  ok := coalesce(lim_ok AND lag >= 0 AND lag <= extract(epoch FROM lim.commit_lag), false);
  detail := pg_catalog.format('seconds=%s limit_s=%s basis=%s',
              coalesce(pg_catalog.round(lag, 3)::text, 'unknown'),
              CASE WHEN lim_ok THEN pg_catalog.round(extract(epoch FROM lim.commit_lag), 3)::text ELSE 'invalid' END,
              basis);
  RETURN NEXT;
END
$$;

REVOKE ALL ON FUNCTION synchro._readiness(boolean) FROM PUBLIC;

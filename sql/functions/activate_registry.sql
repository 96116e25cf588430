-- Validates the pending registry generation and makes it active at a commit-ordered
-- position: fence triggers installed and enabled, the publication holding exactly the
-- registered relations, versions allocated for rows already in newly registered
-- relations (before the first start; else by the runner), projection bootstraps
-- requested (synchro.bootstrap, staged by the runner under an exported snapshot after
-- this commit), membership-rule generations bumped for changed scope prefixes, and a
-- transactional logical message (prefix synchro.registry) marking where in source
-- order the new generation starts. Row events before that message in the same
-- transaction belong to the previous generation.
CREATE OR REPLACE FUNCTION synchro.activate_registry() RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The reads of registered tables below are planned as the owner: no CHECK constraint
-- of theirs may be folded (synchro._planned_app_code says why).
SET constraint_exclusion = 'partition'
AS $$
DECLARE
  g bigint;
  prev bigint;
  r record;
  chk record;
  trg text;
  pub text;
  rels text;
  msg jsonb;
  running boolean;
  reproject boolean;
  empty boolean;
  rb record;
BEGIN
  PERFORM synchro._registry_lock();
  SELECT generation INTO g FROM synchro.registry_generation WHERE state = 'pending';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'activation refused: no registry generation is staged' USING ERRCODE = 'SY400';
  END IF;
  SELECT generation INTO prev FROM synchro.registry_generation WHERE state = 'active';
  running := EXISTS (SELECT 1 FROM synchro.progress);
  -- A reset stages the registered relations of one generation; a bootstrap staged
  -- meanwhile would be merged into neither stream.
  IF EXISTS (SELECT 1 FROM synchro.reset x WHERE x.phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed')) THEN
    RAISE EXCEPTION 'activation refused: a stream reset is open; activate or abort it first' USING ERRCODE = 'SY400';
  END IF;

  -- Rebinds (synchro.rebind_relation): the old table is gone, and the runner has
  -- processed the WAL past the moment the rebind was staged, so no change of the old
  -- table is left to decode under the old OID. Then the relation names the new table.
  FOR rb IN SELECT * FROM synchro.relation_rebind x WHERE x.generation = g ORDER BY x.relation_id LOOP
    IF EXISTS (SELECT 1 FROM pg_class c JOIN synchro.relation rel ON rel.relid = c.oid
                WHERE rel.relation_id = rb.relation_id) THEN
      RAISE EXCEPTION 'activation refused: relation_id % still exists; rebind is for a dropped and recreated table',
        rb.relation_id USING ERRCODE = 'SY400';
    END IF;
    IF running AND NOT EXISTS (SELECT 1 FROM synchro.progress p WHERE p.processed_end_lsn >= rb.staged_lsn) THEN
      RAISE EXCEPTION 'activation refused: the runner has not processed the WAL up to the rebind of relation_id % yet; retry shortly',
        rb.relation_id USING ERRCODE = 'SY400';
    END IF;
    UPDATE synchro.relation rel SET relid = rb.relid, schema_name = rb.schema_name, table_name = rb.table_name
     WHERE rel.relation_id = rb.relation_id;
    -- The old table's row versions: the recreated table's rows get new ones below.
    DELETE FROM synchro.row_version v WHERE v.relation_id = rb.relation_id;
  END LOOP;

  -- Every table this activation alters, locked at once (synchro._activation_lock_tables
  -- says why): no lock is held while another is waited for.
  PERFORM synchro._activation_lock_tables(g, prev);

  -- Every registration again: the relation may have drifted since it was staged (or
  -- since the previous activation). Drift is never reinterpreted as a new relation.
  FOR r IN
    SELECT rel.*, reg.columns
      FROM synchro.registration reg JOIN synchro.relation rel USING (relation_id)
     WHERE reg.generation = g
     ORDER BY rel.relation_id
  LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_class WHERE oid = r.relid) THEN
      RAISE EXCEPTION 'activation refused: relation drift (relation_id % no longer exists)', r.relation_id
        USING ERRCODE = 'SY400';
    END IF;
    chk := synchro._check_relation(r.relid::regclass);
    IF chk.schema_name <> r.schema_name OR chk.table_name <> r.table_name THEN
      RAISE EXCEPTION 'activation refused: relation drift (relation_id % was renamed or moved)', r.relation_id
        USING ERRCODE = 'SY400';
    END IF;
    IF chk.key_column <> r.key_column OR chk.key_pg_type <> r.key_pg_type THEN
      RAISE EXCEPTION 'activation refused: relation drift (primary key of relation_id % changed)', r.relation_id
        USING ERRCODE = 'SY400';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(r.columns) c
                WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                                   WHERE a.attrelid = r.relid AND a.attname = c AND a.attnum > 0 AND NOT a.attisdropped)) THEN
      RAISE EXCEPTION 'activation refused: relation drift (a registered column of relation_id % no longer exists)', r.relation_id
        USING ERRCODE = 'SY400';
    END IF;
  END LOOP;

  -- Scope rules: columns registered, via a registered dependency, prefixes unambiguous.
  IF EXISTS (
      SELECT 1 FROM synchro.scope_rule s
        JOIN synchro.registration reg ON reg.generation = s.generation AND reg.relation_id = s.relation_id
       WHERE s.generation = g AND NOT (s.column_name = ANY (reg.columns))) THEN
    RAISE EXCEPTION 'activation refused: a scope rule column is not a registered column' USING ERRCODE = 'SY400';
  END IF;
  IF EXISTS (
      SELECT 1 FROM synchro.scope_rule s
       WHERE s.generation = g AND s.via_relation_id IS NOT NULL
         AND NOT EXISTS (
           SELECT 1 FROM synchro.registration reg JOIN synchro.relation rel USING (relation_id)
            WHERE reg.generation = g AND reg.relation_id = s.via_relation_id
              AND rel.registration_kind = 'capture_dependency'
              AND s.via_match = ANY (reg.columns) AND s.via_scope = ANY (reg.columns))) THEN
    RAISE EXCEPTION 'activation refused: a scope rule via is not a registered dependency with registered via columns'
      USING ERRCODE = 'SY400';
  END IF;
  -- The via rules' column types again, on the tables as they are now (rebinds applied):
  -- set_columns after a retype, or a rebind to a table whose column has another type,
  -- must not reach a rule staging refuses.
  IF EXISTS (
      SELECT 1 FROM synchro.scope_rule s
        JOIN synchro.relation sr ON sr.relation_id = s.relation_id
        JOIN synchro.relation sv ON sv.relation_id = s.via_relation_id
       WHERE s.generation = g
         AND NOT synchro._via_match_comparable(sr.relid, s.column_name, sv.relid, s.via_match)) THEN
    RAISE EXCEPTION 'activation refused: a via scope rule''s column_name and via_match must be of one type whose text is its equality (text or varchar under a deterministic collation, an integer type, uuid, boolean, date, timestamp, timestamptz or bytea)'
      USING ERRCODE = 'SY400';
  END IF;
  -- A scope names its prefix unambiguously only if no prefix starts another one.
  IF EXISTS (
      SELECT 1 FROM (SELECT DISTINCT scope_prefix FROM synchro.scope_rule WHERE generation = g) a,
                    (SELECT DISTINCT scope_prefix FROM synchro.scope_rule WHERE generation = g) b
       WHERE a.scope_prefix <> b.scope_prefix AND starts_with(b.scope_prefix, a.scope_prefix)) THEN
    RAISE EXCEPTION 'activation refused: a scope prefix must not be the beginning of another scope prefix'
      USING ERRCODE = 'SY400';
  END IF;

  -- Triggers. CREATE OR REPLACE TRIGGER takes SHARE ROW EXCLUSIVE on the table, so no
  -- write slips in between the trigger and the version allocation below.
  FOR r IN
    SELECT rel.*, (prev IS NULL OR NOT EXISTS (
             SELECT 1 FROM synchro.registration p WHERE p.generation = prev AND p.relation_id = rel.relation_id)) AS is_new,
           EXISTS (SELECT 1 FROM synchro.relation_rebind x WHERE x.generation = g AND x.relation_id = rel.relation_id) AS rebound
      FROM synchro.registration reg JOIN synchro.relation rel USING (relation_id)
     WHERE reg.generation = g
     ORDER BY rel.relation_id
  LOOP
    PERFORM synchro._install_triggers(r.relation_id);
    -- Under the triggers' lock (SHARE ROW EXCLUSIVE, which keeps CREATE STATISTICS and
    -- CREATE INDEX out until this commits), before any read of the table planned as the
    -- owner (here, and every fence's full check from this activation on).
    IF synchro._planned_app_code(r.relid) THEN
      RAISE EXCEPTION 'activation refused: relation_id % has an index or statistics expression that calls a function or operator of the application (planned as the pack owner): hand the function to a superuser or drop the expression', r.relation_id
        USING ERRCODE = 'feature_not_supported';
    END IF;
    -- Registered column types, so capture tells a retyped column (drift) apart, and
    -- attribute numbers, so readiness and the baselines tell a column dropped and added
    -- again under the same name and type apart (its values are gone with no row event).
    UPDATE synchro.registration reg
       SET column_types = ARRAY(
             SELECT a.atttypid FROM unnest(reg.columns) WITH ORDINALITY c(name, n)
               JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = c.name
              ORDER BY c.n),
           column_attnums = ARRAY(
             SELECT a.attnum FROM unnest(reg.columns) WITH ORDINALITY c(name, n)
               JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = c.name
              ORDER BY c.n)
     WHERE reg.generation = g AND reg.relation_id = r.relation_id;
    -- A column retyped since it was staged must still render safely.
    PERFORM synchro._check_render(r.relid::regclass,
                                  (SELECT reg.columns FROM synchro.registration reg
                                    WHERE reg.generation = g AND reg.relation_id = r.relation_id));
    IF (r.is_new OR r.rebound) AND NOT running THEN
      -- Rows that never passed a fence still need a version for rebuild and push CAS.
      -- Before the runner's first start only: the first start's baseline takes every
      -- row. On a running stream the runner allocates them after this commit, when
      -- every write passes the triggers just installed, in short transactions that
      -- lock no table (synchro.runner_bootstrap_versions).
      EXECUTE format(
        'INSERT INTO synchro.row_version (relation_id, pk, version) '
        'SELECT $1, %I::text, synchro._new_version() FROM ONLY %I.%I ON CONFLICT DO NOTHING',
        r.key_column, r.schema_name, r.table_name)
      USING r.relation_id;
    END IF;

    -- Projection bootstrap: the running stream's projection of this relation is
    -- missing or in another shape. Nothing is copied here, and no lock is held beyond
    -- the trigger statements' until this commit: the runner stages the rows under an
    -- exported snapshot taken after this commit, and the main worker merges them at
    -- the snapshot's consistent point (docs/bootstrap.md).
    reproject := r.is_new OR r.rebound OR prev IS NULL OR EXISTS (
      SELECT 1 FROM synchro.registration p, synchro.registration q
       WHERE p.generation = prev AND p.relation_id = r.relation_id
         AND q.generation = g AND q.relation_id = r.relation_id
         AND (p.columns IS DISTINCT FROM q.columns OR p.column_types IS DISTINCT FROM q.column_types
              -- a column dropped and added again: its rows' values are gone
              OR (p.column_attnums IS NOT NULL AND p.column_attnums IS DISTINCT FROM q.column_attnums)));
    -- A new relation whose table is empty has nothing to stage: it streams from this
    -- activation on, like any registered relation (its projection is empty at this
    -- position). Read under the trigger statements' lock, which keeps writers out until
    -- this commits; only under READ COMMITTED, whose statement snapshot is taken after
    -- the lock (an older transaction snapshot could miss a row committed before it).
    IF running AND reproject AND r.is_new AND NOT r.rebound
       AND current_setting('transaction_isolation') = 'read committed' THEN
      EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM ONLY %I.%I)', r.schema_name, r.table_name) INTO empty;
      IF empty THEN
        reproject := false;
      END IF;
    END IF;
    IF running AND reproject THEN
      -- streamed: registered in the previous generation, so its projection exists
      -- (consumer groups get the merge's difference); _bootstrap_supersede keeps it
      -- false when the previous generation's own bootstrap never merged.
      INSERT INTO synchro.bootstrap (generation, relation_id, kind, phase, stream_generation, streamed)
      SELECT g, r.relation_id, 'project', 'requested', p.stream_generation, NOT r.is_new FROM synchro.progress p;
      PERFORM synchro._bootstrap_supersede(r.relation_id, g);
    END IF;
  END LOOP;

  -- Relations that leave the registry: no fence may run for them any more (a fence
  -- message without its row event would block capture), and on a running stream their
  -- projection, rule index and membership are dropped at this activation's position.
  FOR r IN
    SELECT rel.* FROM synchro.registration p JOIN synchro.relation rel USING (relation_id)
     WHERE p.generation = prev
       AND NOT EXISTS (SELECT 1 FROM synchro.registration q WHERE q.generation = g AND q.relation_id = p.relation_id)
     ORDER BY rel.relation_id
  LOOP
    -- By OID, not by the registered name: a renamed table keeps its triggers (and the
    -- fence function could not be dropped: 2BP01, TestRegistryUnregisterRenamedTable),
    -- and another table that took the name would lose its own.
    IF EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = r.relid) THEN
      FOREACH trg IN ARRAY ARRAY['synchro_guard_key', 'synchro_guard_truncate', 'synchro_fence_insert',
                                   'synchro_fence_update', 'synchro_fence_delete'] LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', trg, r.relid::regclass);
      END LOOP;
    END IF;
    EXECUTE format('DROP FUNCTION IF EXISTS synchro.%I()', '_fence_' || r.relation_id);
    IF running THEN
      -- Nothing to stage: merged at the activation's position.
      INSERT INTO synchro.bootstrap (generation, relation_id, kind, phase, stream_generation)
      SELECT g, r.relation_id, 'remove', 'staged', p.stream_generation FROM synchro.progress p;
      PERFORM synchro._bootstrap_supersede(r.relation_id, g);
    END IF;
  END LOOP;

  -- The publication holds exactly the registered relations, never the synchro schema.
  SELECT value INTO pub FROM synchro.setting WHERE name = 'publication';
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = pub) THEN
    EXECUTE format('CREATE PUBLICATION %I WITH (publish = %L)', pub, 'insert, update, delete, truncate');
  ELSIF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = pub AND pubowner <> current_user::regrole) THEN
    -- Made by another role (any role with CREATE on the database can), it stays that
    -- role's to alter: publish only inserts, drop a table, and capture breaks
    -- (TestActivationRefusesForeignPublication). The pack's own only.
    RAISE EXCEPTION 'activation refused: the publication exists and belongs to another role' USING ERRCODE = 'SY400';
  ELSIF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = pub AND puballtables) THEN
    RAISE EXCEPTION 'activation refused: the publication must not be FOR ALL TABLES' USING ERRCODE = 'SY400';
  ELSE
    EXECUTE format('ALTER PUBLICATION %I SET (publish = %L, publish_via_partition_root = false)',
                   pub, 'insert, update, delete, truncate');
  END IF;
  SELECT string_agg(format('ONLY %I.%I', rel.schema_name, rel.table_name), ', ' ORDER BY rel.relation_id)
    INTO rels
    FROM synchro.registration reg JOIN synchro.relation rel USING (relation_id)
   WHERE reg.generation = g;
  IF rels IS NOT NULL THEN
    EXECUTE format('ALTER PUBLICATION %I SET TABLE %s', pub, rels);
  END IF;

  -- Membership-rule generations: a prefix whose rules differ from the previous
  -- generation's gets this generation. The rules are compared as a set of values, each
  -- rule's fields as one jsonb array, ordered by that value and without repeats (a row's
  -- scopes are the union of its rules: the same rules staged in another order, or one
  -- twice, are the same rule set, and kept the prefix's cursors only since 2026-12-04,
  -- TestReadEdgeSameRuleSetReorderedKeepsCursors): a digest of the fields joined with '|'
  -- and ';' gave two rule sets one digest when a column name held a separator (or a
  -- NULL field was skipped), and such a rule change kept its prefix's cursors and
  -- membership (TestRuleChangeWithSeparatorInColumnName). rules_digest records the
  -- digest of that encoding; '' stands for "no rules".
  WITH cur AS (
    SELECT s.scope_prefix,
           jsonb_agg(DISTINCT jsonb_build_array(s.relation_id, s.column_name, s.via_relation_id, s.via_match, s.via_scope)
                     ORDER BY jsonb_build_array(s.relation_id, s.column_name, s.via_relation_id, s.via_match, s.via_scope)) AS rules
      FROM synchro.scope_rule s WHERE s.generation = g GROUP BY s.scope_prefix),
  old AS (
    SELECT s.scope_prefix,
           jsonb_agg(DISTINCT jsonb_build_array(s.relation_id, s.column_name, s.via_relation_id, s.via_match, s.via_scope)
                     ORDER BY jsonb_build_array(s.relation_id, s.column_name, s.via_relation_id, s.via_match, s.via_scope)) AS rules
      FROM synchro.scope_rule s WHERE s.generation = prev GROUP BY s.scope_prefix)
  INSERT INTO synchro.scope_prefix AS p (scope_prefix, rule_generation, rules_digest)
  SELECT c.scope_prefix, g, encode(sha256(convert_to(c.rules::text, 'UTF8')), 'hex')
    FROM cur c LEFT JOIN old o ON o.scope_prefix = c.scope_prefix
   WHERE o.rules IS DISTINCT FROM c.rules
      OR NOT EXISTS (SELECT 1 FROM synchro.scope_prefix x WHERE x.scope_prefix = c.scope_prefix)
  ON CONFLICT (scope_prefix) DO UPDATE
    SET rule_generation = excluded.rule_generation, rules_digest = excluded.rules_digest;
  -- A prefix left without rules changed too: its membership is re-evaluated to nothing
  -- and its cursors are stale. The empty digest stands for "no rules".
  UPDATE synchro.scope_prefix p SET rule_generation = g, rules_digest = ''
   WHERE p.rules_digest <> ''
     AND NOT EXISTS (SELECT 1 FROM synchro.scope_rule s WHERE s.generation = g AND s.scope_prefix = p.scope_prefix);
  -- A prefix whose rules (before or after) name a relation this activation re-projects
  -- or removes, directly or through a dependency: its clients rebuild (SY409), since
  -- the bootstrap delivers no incremental effects.
  UPDATE synchro.scope_prefix p SET rule_generation = g
   WHERE p.rule_generation <> g
     AND p.scope_prefix IN (
       SELECT s.scope_prefix FROM synchro.scope_rule s JOIN synchro.bootstrap b
           ON b.generation = g AND (b.relation_id = s.relation_id OR b.relation_id = s.via_relation_id)
        WHERE s.generation IN (g, prev));

  UPDATE synchro.registry_generation SET state = 'retired' WHERE state = 'active';
  UPDATE synchro.registry_generation SET state = 'active', activated_at = now() WHERE generation = g;

  -- Authenticated (synchro._message_mac): the runner counts only the pack's own
  -- activation messages, whoever else emits one with this prefix.
  msg := jsonb_build_object('v', 2, 'generation', g, 'previous', prev);
  PERFORM pg_logical_emit_message(true, 'synchro.registry',
    (msg || jsonb_build_object('mac', synchro._message_mac('synchro.registry', synchro._message_body('synchro.registry', msg))))::text);
  RETURN g;
END
$$;

REVOKE ALL ON FUNCTION synchro.activate_registry() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.activate_registry() TO synchro_operator;

-- Validates the pending registry generation and makes it active at a commit-ordered
-- position: fence triggers installed and enabled, the publication holding exactly the
-- registered relations, versions allocated for rows already in newly registered
-- relations, membership-rule generations bumped for changed scope prefixes, and a
-- transactional logical message (prefix synchro.registry) marking where in source
-- order the new generation starts. Row events before that message in the same
-- transaction belong to the previous generation.
CREATE OR REPLACE FUNCTION synchro.activate_registry() RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint;
  prev bigint;
  r record;
  chk record;
  nonempty boolean;
  pub text;
  rels text;
  msg jsonb;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.registry', synchro._lock_seed()));
  SELECT generation INTO g FROM synchro.registry_generation WHERE state = 'pending';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'activation refused: no registry generation is staged' USING ERRCODE = 'SY400';
  END IF;
  SELECT generation INTO prev FROM synchro.registry_generation WHERE state = 'active';

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
             SELECT 1 FROM synchro.registration p WHERE p.generation = prev AND p.relation_id = rel.relation_id)) AS is_new
      FROM synchro.registration reg JOIN synchro.relation rel USING (relation_id)
     WHERE reg.generation = g
     ORDER BY rel.relation_id
  LOOP
    PERFORM synchro._install_triggers(r.relation_id);
    -- Registered column types, so capture tells a retyped column (drift) apart.
    UPDATE synchro.registration reg
       SET column_types = ARRAY(
             SELECT a.atttypid FROM unnest(reg.columns) WITH ORDINALITY c(name, n)
               JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = c.name
              ORDER BY c.n)
     WHERE reg.generation = g AND reg.relation_id = r.relation_id;
    -- A column retyped since it was staged must still render safely.
    PERFORM synchro._check_render(r.relid::regclass,
                                  (SELECT reg.columns FROM synchro.registration reg
                                    WHERE reg.generation = g AND reg.relation_id = r.relation_id));
    IF r.is_new AND EXISTS (SELECT 1 FROM synchro.progress) THEN
      -- A running stream has no projection of this relation's rows. Until projection
      -- bootstrap exists, only an empty relation can join a running stream (its rows
      -- then all arrive through the WAL after this activation).
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM ONLY %I.%I)', r.schema_name, r.table_name) INTO nonempty;
      IF nonempty THEN
        RAISE EXCEPTION 'activation refused: relation_id % is not empty and the stream is running; projection bootstrap is required',
          r.relation_id USING ERRCODE = 'SY400';
      END IF;
    END IF;
    IF r.is_new THEN
      -- Rows that never passed a fence still need a version for rebuild and push CAS.
      EXECUTE format(
        'INSERT INTO synchro.row_version (relation_id, pk, version) '
        'SELECT $1, %I::text, synchro._new_version() FROM ONLY %I.%I ON CONFLICT DO NOTHING',
        r.key_column, r.schema_name, r.table_name)
      USING r.relation_id;
    END IF;
  END LOOP;

  -- The publication holds exactly the registered relations, never the synchro schema.
  SELECT value INTO pub FROM synchro.setting WHERE name = 'publication';
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = pub) THEN
    EXECUTE format('CREATE PUBLICATION %I WITH (publish = %L)', pub, 'insert, update, delete, truncate');
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

  -- Membership-rule generations: a prefix whose rules changed gets this generation.
  INSERT INTO synchro.scope_prefix AS p (scope_prefix, rule_generation, rules_digest)
  SELECT s.scope_prefix, g,
         encode(sha256(convert_to(string_agg(
           concat_ws('|', s.relation_id, s.column_name, s.via_relation_id, s.via_match, s.via_scope), ';'
           ORDER BY s.relation_id, s.rule_no), 'UTF8')), 'hex')
    FROM synchro.scope_rule s
   WHERE s.generation = g
   GROUP BY s.scope_prefix
  ON CONFLICT (scope_prefix) DO UPDATE
    SET rule_generation = excluded.rule_generation, rules_digest = excluded.rules_digest
    WHERE p.rules_digest IS DISTINCT FROM excluded.rules_digest;

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

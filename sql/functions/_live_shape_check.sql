-- Before a baseline reads a registered relation's live rows as the pack's owner
-- (synchro._baseline_rows for the first start and a reset, synchro.runner_bootstrap_stage
-- for a projection bootstrap): the key and the registered columns still have the types
-- they were registered with. The SQL that reads them (t.key::text, to_jsonb of a json
-- column) is written for those types; PostgreSQL finds a cast by type, so a column the
-- table's owner retyped to its own type with a cast to text or json would run that
-- cast with the owner's rights (found by review in the twelfth session). A retyped
-- column is relation drift: the baseline is refused (0A000) until the relation is
-- registered again.
--
-- The table is locked first (ACCESS SHARE, to the end of the caller's transaction): a
-- statement plans against the catalog as it is when it runs, not as the transaction's
-- snapshot saw it, so a type change committed between this check and the read would
-- otherwise pass; with the lock, such a change waits for the baseline.
--
-- The relation must have no index or statistics expression that runs the application's
-- code when the owner plans the read (synchro._planned_app_code). CREATE STATISTICS and
-- CREATE INDEX do not wait for ACCESS SHARE, so one committed in the moment between this
-- check and the read's planning still gets through (docs/security.md, "Known open
-- paths"). A lock that keeps them out (SHARE UPDATE EXCLUSIVE, held for the whole copy of
-- a projection bootstrap) made any activation during a staging wait for the copy with
-- every registered table's writers queued behind it, and deadlock with it
-- (TestBootstrapEdgeActivationDuringStagingBlocksWriters, ...Deadlocks): not kept.
--
-- The callers run with constraint_exclusion = partition (runner/conn.go pins it on
-- the runner's sessions), so no CHECK constraint is folded either.
CREATE OR REPLACE FUNCTION synchro._live_shape_check(rid bigint, reg bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  r synchro.relation;
  g synchro.registration;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
  SELECT * INTO g FROM synchro.registration WHERE generation = reg AND relation_id = rid;
  EXECUTE format('LOCK TABLE ONLY %I.%I IN ACCESS SHARE MODE', r.schema_name, r.table_name);
  -- The registered name must still be the registered relation: the caller reads the
  -- table by that name with the owner's rights, and a renamed table's old name may
  -- now be a view of the application, whose functions would run as the owner
  -- (TestBaselineRefusesRenamedRelation). Checked after the lock: LOCK TABLE on a view
  -- runs none of its code, and the locked table cannot be renamed until this
  -- transaction ends.
  IF to_regclass(format('%I.%I', r.schema_name, r.table_name)) IS DISTINCT FROM r.relid THEN
    RAISE EXCEPTION 'baseline refused: relation_id % was renamed or moved (relation drift): rename it back, or rebind it', rid
      USING ERRCODE = 'feature_not_supported';
  END IF;
  IF synchro._planned_app_code(r.relid) THEN
    RAISE EXCEPTION 'baseline refused: relation_id % has an index or statistics expression that calls a function or operator of the application (planned as the pack owner): hand the function to a superuser or drop the expression', rid
      USING ERRCODE = 'feature_not_supported';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_attribute a
                  WHERE a.attrelid = r.relid AND a.attname = r.key_column AND a.attnum > 0 AND NOT a.attisdropped
                    AND a.atttypid = ('pg_catalog.' || quote_ident(r.key_pg_type))::regtype)
     OR (g.column_attnums IS NOT NULL AND EXISTS (
           SELECT 1 FROM unnest(g.columns, g.column_attnums) c(name, num)
            WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                               WHERE a.attrelid = r.relid AND a.attname = c.name AND a.attnum = c.num
                                 AND NOT a.attisdropped)))
     OR (g.column_types IS NOT NULL AND EXISTS (
           SELECT 1 FROM unnest(g.columns, g.column_types) c(name, typ)
            WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                               WHERE a.attrelid = r.relid AND a.attname = c.name AND a.attnum > 0
                                 AND NOT a.attisdropped AND a.atttypid = c.typ))) THEN
    RAISE EXCEPTION 'baseline refused: the key or a registered column of relation_id % changed type, or was dropped and added again, since registration (relation drift): register it again (set_columns) and activate the registry', rid
      USING ERRCODE = 'feature_not_supported';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._live_shape_check(bigint, bigint) FROM PUBLIC;

-- Regenerates the fence function of every registration of the active generation, and
-- re-creates its triggers only where they are not as _install_triggers makes them.
-- Every install runs it after re-applying the function files, so a change to the fence
-- template (synchro._fence_source) reaches existing relations.
--
-- Why the triggers are checked first: replacing a function takes no lock on the
-- table, but CREATE OR REPLACE TRIGGER and ALTER TABLE ... ENABLE TRIGGER take SHARE ROW
-- EXCLUSIVE on it, which waits for every open write transaction on that table while
-- new writes queue behind it. An install or upgrade that changes no trigger (a re-run
-- of `synchro migrate up` or `synchro sql`, most upgrades) must not stall the
-- application's writes. A trigger counts as current when it exists, is enabled (origin
-- mode), calls the expected function and has the expected type bits (timing, level,
-- events) and, for the key guard, a WHEN condition. A release that changes a trigger
-- in another way (its WHEN condition, its arguments) must extend this check.
CREATE OR REPLACE FUNCTION synchro._refresh_fences() RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
  n int := 0;
BEGIN
  FOR r IN
    SELECT rel.relation_id, rel.relid
      FROM synchro.registration reg
      JOIN synchro.registry_generation g ON g.generation = reg.generation AND g.state = 'active'
      JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
     WHERE EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = rel.relid)
     ORDER BY reg.relation_id
  LOOP
    EXECUTE synchro._fence_source(r.relation_id);
    IF (SELECT count(*)
          FROM pg_trigger t
          JOIN (VALUES
                  ('synchro_guard_key', 'synchro._refuse_key_change()', 19, true),
                  ('synchro_guard_truncate', 'synchro._refuse_truncate()', 34, false),
                  ('synchro_fence_insert', format('synchro.%I()', '_fence_' || r.relation_id), 5, false),
                  ('synchro_fence_update', format('synchro.%I()', '_fence_' || r.relation_id), 17, false),
                  ('synchro_fence_delete', format('synchro.%I()', '_fence_' || r.relation_id), 9, false))
               AS x(name, fn, typ, has_when)
            ON t.tgname = x.name
         WHERE t.tgrelid = r.relid AND NOT t.tgisinternal
           AND t.tgenabled = 'O'
           AND t.tgfoid = to_regprocedure(x.fn)
           AND t.tgtype = x.typ
           AND (t.tgqual IS NOT NULL) = x.has_when) <> 5
    THEN
      PERFORM synchro._install_triggers(r.relation_id);
    END IF;
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

REVOKE ALL ON FUNCTION synchro._refresh_fences() FROM PUBLIC;

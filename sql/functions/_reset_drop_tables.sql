-- Drops the reset tables (synchro._reset_tables) that exist in schema sch, one of the
-- two private reset schemas: discarding a stage (synchro_reset) or retiring the old
-- projections after an activation (synchro_retired).
CREATE OR REPLACE FUNCTION synchro._reset_drop_tables(sch text) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  t text;
BEGIN
  IF sch NOT IN ('synchro_reset', 'synchro_retired') THEN
    RAISE EXCEPTION '_reset_drop_tables: not a reset schema' USING ERRCODE = 'SY400';
  END IF;
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    -- Looked up first rather than DROP ... IF EXISTS: no notice for the operator.
    IF to_regclass(format('%I.%I', sch, t)) IS NOT NULL THEN
      EXECUTE format('DROP TABLE %I.%I', sch, t);
    END IF;
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_drop_tables(text) FROM PUBLIC;

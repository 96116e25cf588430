-- Makes the empty staged tables of a reset in schema synchro_reset: projection,
-- rule_value, membership and progress, each a copy of the live table's current shape
-- (columns, defaults, checks, indexes), so that materialization runs on them unchanged
-- once synchro._reset_swap puts them under the live names. Copying the shape at run
-- time, not in a migration, keeps the stage equal to the live tables whatever later
-- migrations change. Indexes get the live indexes' names (LIKE invents its own), so
-- the installed stage is indistinguishable from the tables it replaces.
CREATE OR REPLACE FUNCTION synchro._reset_stage_tables() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  t  text;
  ix record;
BEGIN
  PERFORM synchro._reset_drop_tables('synchro_reset');
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    EXECUTE format('CREATE TABLE synchro_reset.%I (LIKE synchro.%I INCLUDING ALL)', t, t);
    -- Pair each copied index with its original by definition (uniqueness and
    -- everything after USING), in creation order among equal definitions; rename
    -- through temporary names so that no intermediate name collides.
    FOR ix IN
      WITH src AS (
        SELECT c.relname, i.indisunique, substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$') AS def,
               row_number() OVER (PARTITION BY i.indisunique, substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$')
                                  ORDER BY i.indexrelid) AS n
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = format('synchro.%I', t)::regclass),
      dst AS (
        SELECT c.relname, i.indisunique, substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$') AS def,
               row_number() OVER (PARTITION BY i.indisunique, substring(pg_get_indexdef(i.indexrelid) FROM ' USING .*$')
                                  ORDER BY i.indexrelid) AS n
          FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = format('synchro_reset.%I', t)::regclass)
      SELECT src.relname AS want, dst.relname AS have
        FROM src JOIN dst USING (indisunique, def, n)
    LOOP
      EXECUTE format('ALTER INDEX synchro_reset.%I RENAME TO %I', ix.have, 'synchro_tmp_' || md5(ix.want));
    END LOOP;
    FOR ix IN
      SELECT c.relname AS want FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
       WHERE i.indrelid = format('synchro.%I', t)::regclass
    LOOP
      EXECUTE format('ALTER INDEX synchro_reset.%I RENAME TO %I', 'synchro_tmp_' || md5(ix.want), ix.want);
    END LOOP;
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_stage_tables() FROM PUBLIC;

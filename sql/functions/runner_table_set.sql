-- The table set of a decoder that has no publication to read it from (wal2json's
-- add-tables, docs/decoders.md): every relation registered in an activated registry
-- generation, with the first activated generation that registers it and every
-- activated generation that does (its changes are decoded only while one of those is in
-- effect, as the publication pgoutput reads holds it only then: a relation that a later
-- activation unregistered is the application's own table again, and its writes, which
-- no fence follows any more, must not reach the stream), the union of its registered
-- columns over the activated generations with, for each, the latest activated
-- generation that registers it (a decoder refuses a column only if a generation it can
-- still decode registers it), and the latest activated generation (the same on every
-- row). Read at every replication session's start; identifiers only, never row values.
CREATE OR REPLACE FUNCTION synchro.runner_table_set()
RETURNS TABLE (relid oid, first_generation bigint, generations bigint[], columns text[],
               column_generations bigint[], latest_generation bigint)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  WITH activated AS (
    SELECT g.generation FROM synchro.registry_generation g
     WHERE g.state IN ('active', 'retired') AND g.activated_at IS NOT NULL),
  regs AS (
    SELECT r.relid, reg.generation, reg.columns::text[] || r.key_column::text AS cols
      FROM synchro.relation r
      JOIN synchro.registration reg ON reg.relation_id = r.relation_id
      JOIN activated a ON a.generation = reg.generation),
  cols AS (
    SELECT x.relid, c.name, max(x.generation) AS last
      FROM regs x CROSS JOIN LATERAL unnest(x.cols) AS c(name)
     GROUP BY x.relid, c.name)
  SELECT x.relid, min(x.generation), array_agg(x.generation ORDER BY x.generation),
         (SELECT array_agg(c.name ORDER BY c.name) FROM cols c WHERE c.relid = x.relid),
         (SELECT array_agg(c.last ORDER BY c.name) FROM cols c WHERE c.relid = x.relid),
         (SELECT max(a.generation) FROM activated a)
    FROM regs x
   GROUP BY x.relid
$$;

REVOKE ALL ON FUNCTION synchro.runner_table_set() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_table_set() TO synchro_runner;

-- The table set of a decoder that has no publication to read it from (wal2json's
-- add-tables, docs/decoders.md): every relation registered in an activated registry
-- generation, with the first activated generation that registers it (its changes are
-- decoded only from that generation's activation on, as the publication pgoutput reads
-- holds it only from then on), the union of its registered columns over the activated
-- generations, and the latest activated generation (the same on every row). Read at
-- every replication session's start; identifiers only, never row values.
CREATE OR REPLACE FUNCTION synchro.runner_table_set()
RETURNS TABLE (relid oid, first_generation bigint, columns text[], latest_generation bigint)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  WITH activated AS (
    SELECT g.generation FROM synchro.registry_generation g
     WHERE g.state IN ('active', 'retired') AND g.activated_at IS NOT NULL)
  SELECT r.relid, min(reg.generation),
         array_agg(DISTINCT c.name ORDER BY c.name),
         (SELECT max(a.generation) FROM activated a)
    FROM synchro.relation r
    JOIN synchro.registration reg ON reg.relation_id = r.relation_id
    JOIN activated a ON a.generation = reg.generation
   CROSS JOIN LATERAL unnest(reg.columns::text[] || r.key_column::text) AS c(name)
   GROUP BY r.relid
$$;

REVOKE ALL ON FUNCTION synchro.runner_table_set() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_table_set() TO synchro_runner;

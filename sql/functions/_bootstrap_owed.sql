-- The relations of stream generation gen whose projection is owed a bootstrap that
-- registry generation reg does not bring: the latest projection bootstrap of the
-- relation at or below reg was subsumed (synchro._bootstrap_supersede) by a later
-- activation, which restages the relation in its newer shape or removes it. Until that
-- later activation is in effect, the relation's projection is not the one reg
-- describes (a new table has none at all), so its events are dropped as those before a
-- stage's consistent point are: the later stage's snapshot, taken after its activation,
-- holds them. Materialized against the stale projection, an update that left an
-- out-of-line value unchanged found no prior value, and the stream stopped on a valid
-- transaction (toast_missing; TestBootstrapEdgeSupersededToastUpdate).
CREATE OR REPLACE FUNCTION synchro._bootstrap_owed(gen bigint, reg bigint) RETURNS bigint[]
LANGUAGE sql STABLE
-- No SET clause: called only from functions that pinned search_path.
AS $$
  SELECT coalesce(array_agg(l.relation_id), '{}')
    FROM (SELECT DISTINCT ON (x.relation_id) x.relation_id, x.phase
            FROM synchro.bootstrap x
           WHERE x.kind = 'project' AND x.stream_generation = gen AND x.generation <= reg
           ORDER BY x.relation_id, x.generation DESC) l
   WHERE l.phase = 'subsumed'
$$;

REVOKE ALL ON FUNCTION synchro._bootstrap_owed(bigint, bigint) FROM PUBLIC;

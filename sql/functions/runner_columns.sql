-- The columns the runner stages for each registered relation (issue 13, item 4a).
--
-- The runner stages only registered columns of a WAL tuple: a column nobody registered
-- (a json value jsonb refuses, a huge document) must not be able to stop the stream.
-- For each relation ever registered (relid = the WAL's relation OID) this returns the
-- union of its registered columns over the registry generations from from_generation
-- on (the generation in effect where the runner stages next; NULL: the stream's, from
-- synchro.progress) that were activated, plus its key: a superset of the columns of
-- whichever generation materialization selects for an event, so nothing a generation
-- needs is left out.
--
-- Not a pending generation: the fence is generated at activation, so a column only a
-- pending generation registers is not checked at the source yet, and may hold a value
-- jsonb refuses. A runner that started while a generation was pending staged it for
-- every event; one such value failed the stage's COPY and blocked the stream
-- (TestRunnerPendingColumnNotStaged). No event needs it before the generation's
-- activation message, where the runner loads the columns again (from that generation
-- on, once its transaction is visible, when it is active).
--
-- Not the older generations: the stream never returns to them, and the fence checks
-- at the source only the columns of the active and pending generations (synchro.
-- _fence_value_checks), so once a later activation rebuilt the fence, a column that
-- only a left-behind generation registered can hold a value jsonb refuses (json's
-- \u0000). Staged, it failed the runner's COPY and quarantined a good transaction
-- (TestRunnerRetiredColumnNeverStaged). The runner passes the generation of each
-- registry activation message it stages, and NULL at session start.
-- Materialization still checks every registered column against the WAL's relation
-- (drift) from the staged relation row, which keeps every column's name and type.
--
-- xid: the source transaction being decoded when a registry activation message
-- arrived mid-stream (NULL at session start). Its registrations are read only once it
-- is visible (synchro._await_visible), so later row events of that same transaction
-- stage the newly registered columns.
CREATE OR REPLACE FUNCTION synchro.runner_columns(xid bigint DEFAULT NULL, from_generation bigint DEFAULT NULL)
RETURNS TABLE (relid oid, columns text[])
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  PERFORM synchro._await_visible(runner_columns.xid);
  RETURN QUERY
  SELECT r.relid, array_agg(DISTINCT c.name ORDER BY c.name)
    FROM synchro.relation r
    LEFT JOIN synchro.registration g
      ON g.relation_id = r.relation_id
     AND g.generation >= coalesce(runner_columns.from_generation, (SELECT p.registry_generation FROM synchro.progress p), 0)
     AND EXISTS (SELECT 1 FROM synchro.registry_generation rg
                  WHERE rg.generation = g.generation AND rg.state <> 'pending')
    CROSS JOIN LATERAL unnest(coalesce(g.columns::text[], '{}') || r.key_column::text) AS c(name)
   GROUP BY r.relid;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_columns(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_columns(bigint, bigint) TO synchro_runner;

-- An activation that re-projects or removes a relation (activate_registry) supersedes
-- the relation's earlier projection bootstraps that are not merged yet: the new one
-- stages the relation in its newest shape (or removes it), and the stream merges it at
-- its own consistent point. The earlier ones were staged in their own generation's
-- shape for ever: a shape that no longer stages (a table dropped after it was
-- unregistered, a column whose values no image holds and that the operator
-- unregistered as docs/bootstrap.md says) failed every attempt, and the stream waited
-- at the earlier activation for good (TestBootstrapSupersededByLaterActivation).
--
-- What the earlier stage would have carried comes with the new one: the events of the
-- relation between the two activations are dropped, the new stage's snapshot holds
-- them (synchro._bootstrap_owed; materialized against the stale projection, an update
-- that left an out-of-line value unchanged stopped the stream), and the accepted pushes an earlier
-- snapshot covered are uncovered still, so the new stage's snapshot covers them (or the
-- removal does: synchro._bootstrap_merge). No client reads the relation in between:
-- its prefixes' cursors went stale at the activations, and rebuild waits (SY503) for
-- the new bootstrap's merge.
--
-- Under the bootstrap lock (runner_bootstrap_stage holds it while it stages): a stage
-- committing now finishes first, and its rows go.
CREATE OR REPLACE FUNCTION synchro._bootstrap_supersede(rid bigint, g bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro.activate_registry, which pinned search_path.
AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.bootstrap', synchro._lock_seed()));
  DELETE FROM synchro.bootstrap_row s
   WHERE s.relation_id = rid AND s.generation < g
     AND s.generation IN (SELECT y.generation FROM synchro.bootstrap y
                           WHERE y.relation_id = rid AND y.merged_at IS NULL AND y.phase NOT IN ('merged', 'subsumed'));
  DELETE FROM synchro.bootstrap_coverage c
   WHERE c.relation_id = rid AND c.generation < g
     AND c.generation IN (SELECT y.generation FROM synchro.bootstrap y
                           WHERE y.relation_id = rid AND y.merged_at IS NULL AND y.phase NOT IN ('merged', 'subsumed'));
  -- A relation whose earlier projection bootstrap never merged has no projection of
  -- that shape: the new one streamed only if the one it supersedes did.
  UPDATE synchro.bootstrap n
     SET streamed = n.streamed AND coalesce((SELECT bool_and(y.streamed) FROM synchro.bootstrap y
                                              WHERE y.relation_id = rid AND y.generation < g AND y.kind = 'project'
                                                AND y.merged_at IS NULL AND y.phase NOT IN ('merged', 'subsumed')), true)
   WHERE n.relation_id = rid AND n.generation = g AND n.kind = 'project';
  UPDATE synchro.bootstrap y SET phase = 'subsumed', detail = format('subsumed by generation %s', g)
   WHERE y.relation_id = rid AND y.generation < g AND y.merged_at IS NULL AND y.phase NOT IN ('merged', 'subsumed');
END
$$;

REVOKE ALL ON FUNCTION synchro._bootstrap_supersede(bigint, bigint) FROM PUBLIC;

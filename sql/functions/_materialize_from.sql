-- The loop of synchro.materialize_batch, from transaction first of the staged batch to
-- its last: runs of consecutive ordinary transactions set-based
-- (synchro._materialize_run), every other transaction alone (synchro._materialize_txn),
-- every one alone when set_based is false. Returns the outcomes of transactions
-- first .. n - 1. materialize_batch calls it from 0, after its checks and the
-- bootstrap catch-up; synchro.materialize_write from the first transaction after the
-- prepared ones (a batch with no projection bootstrap unmerged: the catch-up has
-- nothing to do).
CREATE OR REPLACE FUNCTION synchro._materialize_from(
  first int, stream_generation bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[],
  commit_times timestamptz[], set_based boolean)
RETURNS text[]
LANGUAGE plpgsql
-- No SET clause: called only from synchro.materialize_batch and
-- synchro.materialize_write, which pinned search_path and the row-image settings.
AS $$
DECLARE
  n        int := cardinality(commit_lsns);
  alone    int[] := '{}';
  outcomes text[] := '{}';
  i        int := first;
  j        int;
  owed     bigint[];
BEGIN
  IF set_based THEN
    -- Transactions the set-based path does not take: they go alone, in order.
    alone := synchro._mat_batch_alone();
    -- While a projection bootstrap is not merged (synchro._bootstrap_catch_up), the
    -- reference path takes the first transaction at or after each consistent point (the
    -- merge is due before it), and every transaction that touches a relation whose
    -- bootstrap is not staged or not activated in the stream yet (its events were not
    -- dropped by materialize_batch: the reference path waits for the stage or drops them
    -- itself).
    -- So does every transaction that touches a relation owed a later bootstrap
    -- (synchro._bootstrap_owed: the reference path drops its events).
    -- The others cannot meet a bootstrap that is not merged yet and go set-based.
    IF EXISTS (SELECT 1 FROM synchro.bootstrap x WHERE x.merged_at IS NULL AND x.kind = 'project'
                                                  AND x.phase NOT IN ('merged', 'subsumed')) THEN
      alone := alone || coalesce((
        SELECT array_agg(DISTINCT s.txn) FROM pg_temp.synchro_stage s
         WHERE (s.kind IN ('I', 'U', 'D', 'T') AND s.relid IN (
                  SELECT r.relid FROM synchro.bootstrap x JOIN synchro.relation r USING (relation_id)
                   WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase NOT IN ('merged', 'subsumed')
                     AND (x.phase <> 'staged' OR x.generation > (SELECT p.registry_generation FROM synchro.progress p))))
            OR (s.kind = 'M' AND s.prefix = 'synchro.fence' AND s.f_relation_id IN (
                  SELECT x.relation_id FROM synchro.bootstrap x
                   WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase NOT IN ('merged', 'subsumed')
                     AND (x.phase <> 'staged' OR x.generation > (SELECT p.registry_generation FROM synchro.progress p))))), '{}')
        || coalesce((
        SELECT array_agg(f.t) FROM (
          SELECT min(i.n) - 1 AS t FROM synchro.bootstrap x, generate_subscripts(commit_lsns, 1) AS i(n)
           WHERE x.merged_at IS NULL AND x.kind = 'project' AND x.phase = 'staged'
             AND commit_lsns[i.n] >= x.consistent_point
           GROUP BY x.consistent_point) f), '{}');
    END IF;
    owed := synchro._bootstrap_owed(stream_generation, (SELECT p.registry_generation FROM synchro.progress p));
    IF cardinality(owed) > 0 THEN
      alone := alone || coalesce((
        SELECT array_agg(DISTINCT s.txn) FROM pg_temp.synchro_stage s
         WHERE (s.kind IN ('I', 'U', 'D', 'T') AND s.relid IN (SELECT r.relid FROM synchro.relation r WHERE r.relation_id = ANY (owed)))
            OR (s.kind = 'M' AND s.prefix = 'synchro.fence' AND s.f_relation_id = ANY (owed))), '{}');
    END IF;
  END IF;
  WHILE i < n LOOP
    IF NOT set_based OR i = ANY (alone) THEN
      outcomes := outcomes || synchro._materialize_txn(i, stream_generation, commit_lsns[i + 1], end_lsns[i + 1],
                                                       xids[i + 1], commit_times[i + 1]);
      i := i + 1;
    ELSE
      j := i;
      WHILE j + 1 < n AND NOT (j + 1 = ANY (alone)) LOOP
        j := j + 1;
      END LOOP;
      outcomes := outcomes || synchro._materialize_run(i, j, stream_generation, commit_lsns, end_lsns, xids,
                                                       commit_times);
      i := j + 1;
    END IF;
  END LOOP;
  RETURN outcomes;
END
$$;

REVOKE ALL ON FUNCTION synchro._materialize_from(int, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean) FROM PUBLIC;

-- synchro._materialize_run: a run of consecutive ordinary source transactions of the
-- staged batch (txn t_first .. t_last), set-based: one statement per phase for the
-- whole run, whose cost grows with the run, never with the permanent tables.
--
-- Why a run can be done at once. No registry activation is in it, so one registry
-- generation holds for every event. Each row's history in the run is then a chain of
-- links, one per transaction that touched it (its last event there): a link's scopes
-- come from its image, the scopes before it are the previous link's (the stored
-- membership for the first), and its effects are the difference, at that
-- transaction's commit position. Projection, rule values and membership end as the
-- last link leaves them. When the run also changes dependency rows (what via rules
-- read), a synced row's scopes can change at a transaction where it has no link, and
-- depend on the dependency rows as they stand there: the chain becomes a timeline of
-- points, links and the transactions whose dependency changes reach the row, each
-- evaluated against the dependency state at its transaction
-- (synchro._mat_run_points); without dependency changes every point is a link.
--
-- It never classifies a failure: anything unexpected (a mismatched fence, drift, an
-- order problem) raises SYB01 batch_fallback, and the runner re-runs the batch one
-- transaction at a time through synchro._materialize_txn, which quarantines the
-- failing transaction with its own identity and class.
--
-- One phase per function (synchro._mat_run_*), in this order: check the stream
-- position; then the half that needs only the batch (synchro._mat_run_prepare:
-- validate the relations, pair fences, the links with their row images); then the
-- half that follows the batch before (synchro._mat_run_write: the change records,
-- project, evaluate membership, write effects, write membership, write the ledger;
-- with dependency changes: the points and their scopes first, then project).
-- They pass each other the work tables pg_temp.synchro_b_* and a few flags that let
-- a phase skip a statement with nothing to do. The runner's pipelined path calls the
-- two halves in two calls (synchro.materialize_prepare, synchro.materialize_write).
CREATE OR REPLACE FUNCTION synchro._materialize_run(
  t_first int, t_last int, stream_generation bigint, commit_lsns pg_lsn[], end_lsns pg_lsn[], xids bigint[],
  commit_times timestamptz[])
RETURNS text[]
LANGUAGE plpgsql
-- No SET clause: called only from synchro.materialize_batch, which pinned
-- search_path and the row-image settings.
AS $$
DECLARE
  gen       bigint := _materialize_run.stream_generation;
  p         synchro.progress;
  reg       bigint;
  pos       record;
  links     record;
  nestloop  text;
  mergejoin text;
  outcomes  text[];
BEGIN
  SELECT * INTO p FROM synchro.progress FOR UPDATE;
  IF NOT FOUND OR p.stream_generation <> gen OR p.registry_generation IS NULL THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'stream generation';
  END IF;
  reg := p.registry_generation;

  -- The work tables are empty here: every run empties them before it returns (below),
  -- and a failed one takes its rows with it when its transaction rolls back.

  -- Hash joins only, from here to the end of the run. The work tables have no
  -- statistics (a batch is analyzed only past 1,000 row events), and the planner,
  -- guessing a few rows, chose nested loops that rescan one work table per row of
  -- another: the generic plan PL/pgSQL keeps after five calls joined the transactions
  -- to their counts that way (27 ms for 250 one-row transactions, so larger batches got
  -- slower per transaction), and the membership and effect statements anti-joined
  -- b_old and b_scopes by a sequential scan per link (an update backlog: 3.5 times the
  -- apply time of the same inserts). A hash join is linear in the run. Lateral probes
  -- of the permanent tables (OFFSET 0) stay nested loops: they have no other plan.
  -- Restored before every return: the batch's later transactions may take the
  -- per-transaction path.
  nestloop := current_setting('enable_nestloop');
  mergejoin := current_setting('enable_mergejoin');
  PERFORM set_config('enable_nestloop', 'off', true), set_config('enable_mergejoin', 'off', true);
  SELECT * INTO pos
    FROM synchro._mat_run_position(t_first, t_last, gen, p.materialized_commit_lsn, p.generation_start_lsn,
                                   p.processed_end_lsn, commit_lsns, end_lsns, xids, commit_times);
  IF pos.n_new = 0 THEN
    PERFORM set_config('enable_nestloop', nestloop, true), set_config('enable_mergejoin', mergejoin, true);
    RETURN array_fill('duplicate'::text, ARRAY[t_last - t_first + 1]);
  END IF;

  -- Each source transaction's own writes to synchro tables (its push write fences)
  -- are visible: synchro.materialize_batch waited for the whole batch before it
  -- called this (synchro._await_visible_all).
  SELECT * INTO links FROM synchro._mat_run_prepare(t_first, t_last, reg, pos.n_ev, pos.n_fence);
  PERFORM synchro._mat_run_write(gen, reg, links.n_rows, links.multi, links.deletes, links.anyknown);

  IF pos.n_new = t_last - t_first + 1 THEN
    -- No replayed transaction in the run: the common case, without a query.
    outcomes := array_fill('materialized'::text, ARRAY[pos.n_new]);
  ELSE
    outcomes := ARRAY(SELECT CASE WHEN b.t IS NULL THEN 'duplicate' ELSE 'materialized' END
                        FROM generate_series(t_first, t_last) g(t)
                        LEFT JOIN pg_temp.synchro_b_txn b ON b.t = g.t
                       ORDER BY g.t);
  END IF;
  PERFORM synchro._mat_run_clear();
  PERFORM set_config('enable_nestloop', nestloop, true), set_config('enable_mergejoin', mergejoin, true);
  RETURN outcomes;
END
$$;

REVOKE ALL ON FUNCTION synchro._materialize_run(int, int, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]) FROM PUBLIC;

-- A phase of the set-based run (synchro._materialize_run), in a function of its own:
-- the links of the run's rows (pg_temp.synchro_b_links), their images rendered once.
-- multi, deletes and anyknown tell the later phases which of their statements have
-- anything to do.
CREATE OR REPLACE FUNCTION synchro._mat_run_links(
  reg bigint, n_rows int, OUT multi boolean, OUT deletes boolean, OUT anyknown boolean)
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run, under the pinned search_path,
-- row-image settings and join methods of synchro.materialize_batch and the run.
-- plpgsql: the body names pg_temp work tables that do not exist at install time.
AS $$
DECLARE
  rel     record;
  more    boolean;
  dropped boolean;
  known   boolean;
BEGIN
  -- Links: each row's last event in each transaction, numbered along the run, with
  -- its row image rendered once, in the same statement: the registered columns in the
  -- registered shape (synchro._image_sql), as the per-transaction path renders them.
  -- One statement per relation of the run (each has its own image SQL), in a session
  -- function that keeps its plan (synchro._mat_links_fn says why and why it is
  -- safe). The image is measured once there (image_bytes of the projection and the
  -- effects).
  multi := false;
  deletes := false;
  anyknown := false;
  FOR rel IN SELECT DISTINCT w.relation_id FROM pg_temp.synchro_b_rows w LOOP
    EXECUTE format('SELECT x.more, x.gone, x.known FROM %s($1) x', synchro._mat_links_fn(rel.relation_id, reg))
      INTO more, dropped, known USING rel.relation_id;
    multi := multi OR more;
    deletes := deletes OR dropped;
    anyknown := anyknown OR known;
  END LOOP;
  IF n_rows = 0 THEN
    -- No row event, so no links function was made, and the later phases' statements
    -- still name fresh: work tables opened before an upgrade get it here.
    PERFORM synchro._stage_links_fresh();
  END IF;
  IF n_rows > 1000 THEN
    ANALYZE pg_temp.synchro_b_links (t, relation_id, link);
  END IF;
  -- multi: some row has more than one link (it changed in more than one transaction
  -- of the run; read from the links as they are written, not by another scan). When
  -- none has, the effects (synchro._mat_run_effects) skip the join that finds a link's previous one (a
  -- one-time filter: 14 of the effect statement's 62 ms for a 1,000-row transaction,
  -- which has one link per row).
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_links(bigint, int) FROM PUBLIC;

-- The half of the set-based run (synchro._materialize_run) that reads only the staged
-- batch and the registry generation it is given: validate the relations, pair fences,
-- and the links with their row images. Nothing here reads or writes state that an
-- earlier batch may change, so the runner's second apply session can do it for the
-- next batch while the first writes this one (synchro.materialize_prepare). Its
-- results stay in the work tables pg_temp.synchro_b_rows and synchro_b_links; the
-- flags tell synchro._mat_run_write which statements have anything to do.
CREATE OR REPLACE FUNCTION synchro._mat_run_prepare(
  t_first int, t_last int, reg bigint, n_ev bigint, n_fence int,
  OUT n_rows int, OUT multi boolean, OUT deletes boolean, OUT anyknown boolean)
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_run and
-- synchro.materialize_prepare, under the pinned search_path, row-image settings and
-- join methods of the run.
AS $$
DECLARE
  links record;
BEGIN
  PERFORM synchro._mat_run_check_relations(t_first, t_last, reg);
  n_rows := synchro._mat_run_pair_fences(n_ev, n_fence);
  SELECT * INTO links FROM synchro._mat_run_links(reg, n_rows);
  multi := links.multi;
  deletes := links.deletes;
  anyknown := links.anyknown;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_prepare(int, int, bigint, bigint, int) FROM PUBLIC;

-- Part of the links phase of the set-based run (synchro._mat_run_links): the session
-- function that writes the run's links of relation rid (registry generation gen) and renders
-- their row images; returns its name, to be called as
--   SELECT x.more, x.gone, x.known FROM <name>(rid) x
-- (more: some row of the relation has more than one link; gone: some row's last link
-- deletes it; known: some row the run leaves in place is not fresh).
--
-- fresh: the row's only event in the run is an insert (one link, and no other event
-- of the row in its transaction: n_txn 1). Such a row did not exist before
-- the run, so it has no projection, membership or rule value to read or replace:
-- synchro._mat_run_project inserts its projection without ON CONFLICT and skips its
-- probes. Should the pack's state disagree (a projection row there anyway), that
-- INSERT fails and the runner re-runs the batch through the reference path (in the
-- main stream; a reset's catch-up, whose staged state comes from the candidate
-- slot's own snapshot, fails the reset instead, as it does on any error).
--
-- Why a session function. Each relation's links statement embeds its own image SQL
-- (synchro._image_sql), so it was run by EXECUTE: parsed, analyzed and planned again
-- on every run, ~170 us of planning alone (pg_stat_statements, track_planning) in a
-- small batch's ~2 ms. A PL/pgSQL function keeps its plan for the session: the
-- statement is planned once per session, relation and registry generation
-- (registrations in effect never change).
--
-- Why it is safe. The function is created here, by the pack's owner (this runs inside
-- synchro.materialize_batch, SECURITY DEFINER), in the session's temporary schema,
-- where the runner's role cannot alter or replace an object it does not own. It can
-- drop it (DISCARD TEMP drops every temporary object of the session) and make its
-- own: a function under that name the pack did not create, or any other function of
-- that name (an overload), is never called: the run is refused with SYB01
-- batch_fallback, and the runner re-runs the batch through the reference path, which
-- uses no session function.
CREATE OR REPLACE FUNCTION synchro._mat_links_fn(rid bigint, gen bigint) RETURNS text
LANGUAGE plpgsql
-- No SET clause: called only from synchro._mat_run_links, under the pinned
-- search_path and row-image settings of synchro.materialize_batch.
AS $$
DECLARE
  -- _3: the third shape of this function (00019 added fresh and known; 00020 counts
  -- a row's events in its transaction instead of reading the rank that pairing no
  -- longer writes); a session that made an earlier one before an upgrade keeps it
  -- under its old name.
  name  text := format('synchro_links_%s_%s_3', rid, gen);
  fn    regprocedure := pg_catalog.to_regprocedure(format('pg_temp.%I(bigint)', name));
BEGIN
  IF fn IS NULL THEN
    -- Once per session: work tables opened before an upgrade get fresh (00019).
    PERFORM synchro._stage_links_fresh();
    EXECUTE format(
      $f$CREATE FUNCTION pg_temp.%I(rid bigint, OUT more boolean, OUT gone boolean, OUT known boolean) LANGUAGE plpgsql AS %L$f$,
      name, format(
        $b$BEGIN
  WITH ins AS (
    INSERT INTO pg_temp.synchro_b_links (t, relation_id, pk, pk_int, table_id, key_type, op, version,
                                         event_ordinal, image, image_bytes, link, last, fresh)
    SELECT y.t, y.relation_id, y.pk, y.pk_int, y.table_id, y.key_type, y.op, y.version, y.event_ordinal,
           y.image, pg_catalog.octet_length(y.image::pg_catalog.text), y.link, y.last,
           y.link = 1 AND y.last AND y.op = 'insert' AND y.n_txn = 1
      FROM (SELECT x.t, x.relation_id, x.pk, CASE WHEN x.key_type <> 'string' THEN x.pk::bigint END AS pk_int,
                   x.table_id, x.key_type, x.op, x.version, x.event_ordinal, x.n_txn,
                   CASE WHEN x.op <> 'delete' THEN %s END AS image,
                   pg_catalog.row_number() OVER (PARTITION BY x.pk COLLATE "C" ORDER BY x.t) AS link,
                   x.t = pg_catalog.max(x.t) OVER (PARTITION BY x.pk COLLATE "C") AS last
              FROM (SELECT DISTINCT ON (w.pk COLLATE "C", w.t) w.*,
                           pg_catalog.count(*) OVER (PARTITION BY w.pk COLLATE "C", w.t ORDER BY w.seq DESC
                                                     ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS n_txn
                      FROM pg_temp.synchro_b_rows w
                     WHERE w.relation_id = rid ORDER BY w.pk COLLATE "C", w.t, w.seq DESC) x
            OFFSET 0) y
    RETURNING link, last AND op = 'delete' AS dropped, last AND op <> 'delete' AND NOT fresh AS kept)
  SELECT coalesce(pg_catalog.max(ins.link), 0) > 1, coalesce(pg_catalog.bool_or(ins.dropped), false),
         coalesce(pg_catalog.bool_or(ins.kept), false)
    INTO more, gone, known FROM ins;
END$b$, synchro._image_sql(rid, gen, 'x.new_row', false)));
    EXECUTE format('REVOKE ALL ON FUNCTION pg_temp.%I(bigint) FROM PUBLIC', name);
  END IF;
  -- Ours, and alone under its name: an overload the session made (another signature,
  -- a default argument) could make the call ambiguous or pick it.
  IF (SELECT count(*) <> 1 OR bool_or(p.proowner <> current_user::pg_catalog.regrole)
        FROM pg_catalog.pg_proc p
       WHERE p.pronamespace = pg_catalog.pg_my_temp_schema() AND p.proname = name) THEN
    RAISE EXCEPTION 'batch_fallback' USING ERRCODE = 'SYB01', DETAIL = 'a session function the pack did not create';
  END IF;
  RETURN format('pg_temp.%I', name);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_links_fn(bigint, bigint) FROM PUBLIC;

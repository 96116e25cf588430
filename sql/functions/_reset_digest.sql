-- Order-independent digest of a reset's staged rows (what = 'rows': relation, key and
-- version of every projection row) or scopes (what = 'scopes': every membership edge)
-- in table sch.projection / sch.membership: the row count and the sum of a 64-bit hash
-- per row, so it needs no sort and constant memory whatever the size. Taken when the
-- staged state is verified (synchro.runner_reset_ready) and compared by
-- synchro.activate_reset, so that what activates is exactly what was verified.
CREATE OR REPLACE FUNCTION synchro._reset_digest(sch text, what text) RETURNS text
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  d text;
BEGIN
  IF sch NOT IN ('synchro', 'synchro_reset') THEN
    RAISE EXCEPTION '_reset_digest: not a reset schema' USING ERRCODE = 'SY400';
  END IF;
  IF what = 'rows' THEN
    EXECUTE format(
      'SELECT count(*) || '':'' || coalesce(sum((''x'' || left(md5(t.relation_id || '':'' || t.pk || '':'' || t.version), 16))::bit(64)::bigint::numeric), 0) '
      'FROM %I.projection t', sch) INTO d;
  ELSIF what = 'scopes' THEN
    EXECUTE format(
      'SELECT count(*) || '':'' || coalesce(sum((''x'' || left(md5(t.scope || '':'' || t.relation_id || '':'' || t.pk), 16))::bit(64)::bigint::numeric), 0) '
      'FROM %I.membership t', sch) INTO d;
  ELSE
    RAISE EXCEPTION '_reset_digest: unknown digest' USING ERRCODE = 'SY400';
  END IF;
  RETURN d;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_digest(text, text) FROM PUBLIC;

-- Stages a new registered column list for a registered relation in the pending
-- generation (NULL: every column now; the key is always included). At activation the
-- relation's projection is staged again in the new shape (the projection bootstrap,
-- docs/bootstrap.md) and cursors and rebuild sessions of the scope prefixes its rules
-- name become stale (SY409): clients rebuild and get every row in the new shape.
CREATE OR REPLACE FUNCTION synchro.set_columns(relation_id bigint, columns name[]) RETURNS name[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint := synchro._pending_generation();
  r synchro.relation;
  relid oid;
  cols name[];
BEGIN
  SELECT rel.* INTO r FROM synchro.relation rel JOIN synchro.registration reg
      ON reg.relation_id = rel.relation_id AND reg.generation = g
   WHERE rel.relation_id = set_columns.relation_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'set_columns refused: relation_id is not registered in the pending generation' USING ERRCODE = 'SY400';
  END IF;
  -- A rebind staged in this generation names the relation the columns must come from.
  relid := coalesce((SELECT b.relid FROM synchro.relation_rebind b
                      WHERE b.generation = g AND b.relation_id = r.relation_id), r.relid);
  IF NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = relid) THEN
    RAISE EXCEPTION 'set_columns refused: the relation no longer exists (rebind_relation first)' USING ERRCODE = 'SY400';
  END IF;
  IF NOT coalesce(has_table_privilege(synchro._invoker(), relid, 'SELECT'), true) THEN
    RAISE EXCEPTION 'set_columns refused: the calling role may not SELECT the relation' USING ERRCODE = 'SY400';
  END IF;
  cols := synchro._check_columns(relid::regclass, r.key_column, columns);
  IF EXISTS (SELECT 1 FROM synchro.scope_rule s
              WHERE s.generation = g
                AND ((s.relation_id = r.relation_id AND NOT (s.column_name = ANY (cols)))
                  OR (s.via_relation_id = r.relation_id AND NOT (s.via_match = ANY (cols) AND s.via_scope = ANY (cols))))) THEN
    RAISE EXCEPTION 'set_columns refused: a scope rule uses a column the new list leaves out' USING ERRCODE = 'SY400';
  END IF;
  UPDATE synchro.registration reg SET columns = cols
   WHERE reg.generation = g AND reg.relation_id = r.relation_id;
  RETURN cols;
END
$$;

REVOKE ALL ON FUNCTION synchro.set_columns(bigint, name[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.set_columns(bigint, name[]) TO synchro_operator;

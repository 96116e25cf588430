-- Resolves the registered column list of a relation: NULL means every column now, and
-- the key column is always included. Returned in attribute order, so the same set
-- always has the same shape. Unknown, repeated or generated columns are SY400, and so is
-- a column whose type row images cannot render without running the application's own
-- code (synchro._render_kind: composite, range or base types of the application's) or
-- whose text does not read back (synchro._render_unreadable).
CREATE OR REPLACE FUNCTION synchro._check_columns(relation regclass, key_column name, columns name[])
RETURNS name[]
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
DECLARE
  result name[];
  missing name;
BEGIN
  -- Generated columns are not in the WAL's row images (logical replication leaves them
  -- out), so a registered one read as a column the table lost: relation drift (SYP03)
  -- at the table's first write, a good transaction quarantined. "Every column" leaves
  -- them out; naming one, or a generated key, is refused.
  SELECT a.attname INTO missing
    FROM pg_attribute a
   WHERE a.attrelid = relation AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> ''
     AND (a.attname = key_column OR a.attname = ANY (columns))
   ORDER BY a.attnum LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'registration refused: column % is generated, and logical replication does not carry generated columns',
      quote_ident(missing) USING ERRCODE = 'SY400';
  END IF;
  IF columns IS NULL THEN
    SELECT array_agg(a.attname ORDER BY a.attnum) INTO result
      FROM pg_attribute a
     WHERE a.attrelid = relation AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '';
    PERFORM synchro._check_render(relation, result);
    RETURN result;
  END IF;
  IF cardinality(columns) = 0 OR array_position(columns, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'registration refused: columns must be NULL or a list of column names' USING ERRCODE = 'SY400';
  END IF;
  IF (SELECT count(DISTINCT x) FROM unnest(columns) x) <> cardinality(columns) THEN
    RAISE EXCEPTION 'registration refused: a column is listed twice' USING ERRCODE = 'SY400';
  END IF;
  SELECT x INTO missing FROM unnest(columns) x
   WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a
                      WHERE a.attrelid = relation AND a.attname = x AND a.attnum > 0 AND NOT a.attisdropped)
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'registration refused: column % does not exist', quote_ident(missing) USING ERRCODE = 'SY400';
  END IF;
  SELECT array_agg(a.attname ORDER BY a.attnum) INTO result
    FROM pg_attribute a
   WHERE a.attrelid = relation AND a.attnum > 0 AND NOT a.attisdropped
     AND (a.attname = ANY (columns) OR a.attname = key_column);
  PERFORM synchro._check_render(relation, result);
  RETURN result;
END
$$;

REVOKE ALL ON FUNCTION synchro._check_columns(regclass, name, name[]) FROM PUBLIC;

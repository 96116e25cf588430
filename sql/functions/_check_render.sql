-- Refuses (SY400, naming the column) a registered column whose type row images cannot
-- render without running code the application defined (synchro._render_kind), or whose
-- text does not read back as the same value (synchro._render_unreadable).
CREATE OR REPLACE FUNCTION synchro._check_render(relation regclass, columns name[]) RETURNS void
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  bad name;
BEGIN
  SELECT a.attname INTO bad
    FROM pg_catalog.pg_attribute a
   WHERE a.attrelid = relation AND a.attname = ANY (columns) AND a.attnum > 0 AND NOT a.attisdropped
     AND (synchro._render_kind(a.atttypid) IS NULL OR synchro._render_unreadable(a.atttypid))
   ORDER BY a.attnum LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'registration refused: column % has a type row images cannot render (composite, range, a base type of the application''s own, or a built-in type whose text does not read back: OID aliases such as regclass, int2vector, oidvector, pg_node_tree; register a built-in type, an array of one, a domain over one, or an enum)',
      pg_catalog.quote_ident(bad) USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._check_render(regclass, name[]) FROM PUBLIC;

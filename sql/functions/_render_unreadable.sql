-- Whether a column type's text, as the WAL carries it, does not read back as the same
-- value in the pack's session (the type itself or, for an array, its element; domains
-- looked through). A row image could not render such a value, and one written value
-- would fail materialization: a good transaction quarantined. So registration and
-- activation refuse the column (synchro._check_render, SY400).
--   - The OID alias types (regclass, regtype, ...) print an object's name as the
--     printing session's search_path sees it, and read it back by the pack's pinned one
--     (pg_catalog, pg_temp): 'public.docs' arrives as 'docs' and fails (42P01), as does
--     any name whose object was dropped before the runner caught up.
--   - int2vector and oidvector look like arrays (category A) but print as '1 2', not
--     as an array literal (22P02).
--   - pg_node_tree and the statistics and BRIN summary types have no input function
--     (0A000); gtsvector's always fails.
--   - aclitem prints a role by name, or by number once it is gone, and reads a name
--     back only while the role exists: makeaclitem (any role may call it) takes any
--     number, and a grantee dropped before the runner caught up fails too (42704).
-- synchro._render_kind keeps rendering such a column registered before this check
-- existed; the next activation refuses it until set_columns leaves it out.
CREATE OR REPLACE FUNCTION synchro._render_unreadable(typ oid) RETURNS boolean
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  b pg_catalog.pg_type := synchro._base_type(typ);
BEGIN
  IF b.typcategory = 'A' AND b.typelem <> 0 AND b.typlen = -1
     AND NOT (b.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND b.typname IN ('int2vector', 'oidvector')) THEN
    b := synchro._base_type(b.typelem);
  END IF;
  RETURN b.typnamespace = 'pg_catalog'::pg_catalog.regnamespace
     AND b.typname IN ('regclass', 'regtype', 'regproc', 'regprocedure', 'regoper', 'regoperator', 'regconfig',
                       'regdictionary', 'regnamespace', 'regrole', 'regcollation', 'int2vector', 'oidvector',
                       'pg_node_tree', 'pg_ndistinct', 'pg_dependencies', 'pg_mcv_list', 'pg_ddl_command',
                       'pg_brin_bloom_summary', 'pg_brin_minmax_multi_summary', 'aclitem', 'gtsvector');
END
$$;

REVOKE ALL ON FUNCTION synchro._render_unreadable(oid) FROM PUBLIC;

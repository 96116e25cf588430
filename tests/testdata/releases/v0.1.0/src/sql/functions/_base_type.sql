-- The pg_type row of typ with every domain looked through.
CREATE OR REPLACE FUNCTION synchro._base_type(typ oid) RETURNS pg_catalog.pg_type
LANGUAGE sql STABLE
AS $$
  WITH RECURSIVE dom(oid, depth) AS (
    SELECT typ, 0
    UNION ALL
    SELECT d.typbasetype, dom.depth + 1 FROM dom JOIN pg_catalog.pg_type d ON d.oid = dom.oid
     WHERE d.typtype = 'd' AND dom.depth < 32)
  SELECT t FROM dom JOIN pg_catalog.pg_type t ON t.oid = dom.oid ORDER BY dom.depth DESC LIMIT 1
$$;

REVOKE ALL ON FUNCTION synchro._base_type(oid) FROM PUBLIC;

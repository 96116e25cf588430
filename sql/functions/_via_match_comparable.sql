-- Whether a via rule's two columns (the synced table's column_name, the dependency's
-- via_match) can be matched by their rendered values. Membership compares the row
-- images' text, so it agrees with the application's SQL equality only for types whose
-- text is canonical for equality, of one family, under deterministic collations:
-- char(n) pads ('p1' = 'p1      '), numeric keeps its scale (1.0 = 1.00), floats have
-- -0, intervals '1 day' and '24 hours', and a nondeterministic collation equates other
-- texts. A rule on such columns put no row in any scope
-- (TestViaRuleRefusesNonCanonicalMatch). Staging (synchro._stage_scope_rule) and every
-- activation check it: a column retyped with set_columns, or a dependency rebound to a
-- table whose column has another type, reached the same state unchecked
-- (TestOperateEdgeRetypedViaColumnRule). False when either column is missing.
CREATE OR REPLACE FUNCTION synchro._via_match_comparable(
  rel oid, column_name name, via oid, via_match name)
RETURNS boolean
LANGUAGE sql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT count(*) = 2 AND bool_and(x.det)
         AND bool_and(x.typ IN ('text', 'varchar', 'uuid', 'int2', 'int4', 'int8', 'bool', 'date', 'timestamp',
                                'timestamptz', 'bytea'))
         AND count(DISTINCT CASE WHEN x.typ IN ('text', 'varchar') THEN 'text'
                                 WHEN x.typ IN ('int2', 'int4', 'int8') THEN 'int' ELSE x.typ END) = 1
    FROM (SELECT (synchro._base_type(a.atttypid)).typname::text AS typ,
                 coalesce((SELECT c.collisdeterministic FROM pg_collation c WHERE c.oid = a.attcollation), true) AS det
            FROM pg_attribute a
           WHERE (a.attrelid, a.attname) IN ((rel, column_name), (via, via_match))
             AND a.attnum > 0 AND NOT a.attisdropped) x
$$;

REVOKE ALL ON FUNCTION synchro._via_match_comparable(oid, name, oid, name) FROM PUBLIC;

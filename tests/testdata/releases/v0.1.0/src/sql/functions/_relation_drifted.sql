-- Whether a Relation message (as staged: nspname, relname, replica identity, column
-- names, types and key flags) differs from the registered relation r under its
-- registration g: qualified name, DEFAULT identity on the registered key, every
-- registered column present with its registered type. The one rule both
-- materialization paths check (ADR 001, "Registry activation and relation drift").
CREATE OR REPLACE FUNCTION synchro._relation_drifted(
  nspname text, relname text, replident "char", col_names text[], col_types oid[], col_keys boolean[],
  r synchro.relation, columns name[], column_types oid[]) RETURNS boolean
LANGUAGE sql STABLE
AS $$
  SELECT nspname IS DISTINCT FROM (r).schema_name::text OR relname IS DISTINCT FROM (r).table_name::text
      OR replident IS DISTINCT FROM 'd'
      OR ARRAY(SELECT c.name FROM unnest(col_names, col_keys) AS c(name, is_key) WHERE c.is_key)
         IS DISTINCT FROM ARRAY[(r).key_column::text]
      OR EXISTS (SELECT 1 FROM unnest(columns, column_types) AS rc(name, typ)
                  WHERE NOT EXISTS (SELECT 1 FROM unnest(col_names, col_types) AS wc(name, typ)
                                     WHERE wc.name = rc.name::text AND wc.typ = rc.typ))
$$;

REVOKE ALL ON FUNCTION synchro._relation_drifted(text, text, "char", text[], oid[], boolean[], synchro.relation, name[], oid[]) FROM PUBLIC;

-- A column name as a PL/pgSQL field reference after NEW. or OLD.: always double-quoted.
-- format('%I') leaves unreserved SQL keywords bare, and PL/pgSQL's own scanner refuses
-- some of them after a record variable (NEW.by: "record new has no field by").
CREATE OR REPLACE FUNCTION synchro._pl_ident(n name) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT '"' OPERATOR(pg_catalog.||) pg_catalog.replace(n::pg_catalog.text, '"', '""') OPERATOR(pg_catalog.||) '"' $$;

REVOKE ALL ON FUNCTION synchro._pl_ident(name) FROM PUBLIC;

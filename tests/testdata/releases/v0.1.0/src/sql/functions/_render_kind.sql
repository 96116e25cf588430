-- How a registered column of type typ is rendered into row images without running any
-- code the application defined (docs/security.md): materialization and the baseline
-- run as the pack's owner, and an application type's input function, domain CHECK or
-- cast to json would run with the owner's rights. Returns
--   'json'         json or jsonb itself: the staged value is already the JSON value;
--   'label'        an enum (or a domain over one): the label, as a JSON string;
--   'label_array'  an array of such: the labels, as a JSON array of strings;
--   'cast:<type>'  otherwise the value cast from its text to <type>, a pg_catalog type
--                  (the base type of a domain, an array of base types for an array of
--                  domains) whose input function and to_jsonb() are PostgreSQL's own;
--                  to_jsonb() never looks up a cast for a built-in type, and it looks
--                  through domains, so this equals to_jsonb() of the column itself;
--   NULL           not renderable safely: composite, range or base types of an
--                  application's own. Registration and activation refuse such a column.
CREATE OR REPLACE FUNCTION synchro._render_kind(typ oid) RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  b   pg_catalog.pg_type;
  e   pg_catalog.pg_type;
BEGIN
  IF typ IN ('pg_catalog.json'::pg_catalog.regtype, 'pg_catalog.jsonb'::pg_catalog.regtype) THEN
    RETURN 'json';
  END IF;
  b := synchro._base_type(typ);
  IF b.typtype = 'e' THEN
    RETURN 'label';
  END IF;
  IF b.typcategory = 'A' AND b.typelem <> 0 AND b.typlen = -1 THEN
    e := synchro._base_type(b.typelem);
    IF e.typtype = 'e' THEN
      RETURN 'label_array';
    END IF;
    IF e.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND e.typtype IN ('b', 'r', 'm') AND e.typarray <> 0 THEN
      RETURN 'cast:pg_catalog.' || pg_catalog.quote_ident((SELECT a.typname FROM pg_catalog.pg_type a WHERE a.oid = e.typarray));
    END IF;
    RETURN NULL;
  END IF;
  IF b.typnamespace = 'pg_catalog'::pg_catalog.regnamespace AND b.typtype IN ('b', 'r', 'm') THEN
    RETURN 'cast:pg_catalog.' || pg_catalog.quote_ident(b.typname);
  END IF;
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro._render_kind(oid) FROM PUBLIC;

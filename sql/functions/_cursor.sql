-- A pull cursor (docs/sql/pull.md): the authenticated token of
--   c1:<stream generation token>:<membership-rule generation of the scope>:<point>
-- where point is s (generation_start), t.<lsn> (the end of a source transaction) or
-- e.<lsn>.<event ordinal>.<effect ordinal> (inside one). The one writer of the format:
-- pull writes the next cursor, rebuild the cursor a finished rebuild hands over; pull
-- alone parses it, in exactly this shape.
CREATE OR REPLACE FUNCTION synchro._cursor(stream_token uuid, rule_generation text, point text, scope text)
RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already. PL/pgSQL, not SQL: function files install in name order, and a
-- SQL body would be checked before synchro._token exists. Once per page.
AS $$
BEGIN
  RETURN synchro._token(pg_catalog.format('c1:%s:%s:%s', stream_token, rule_generation, point), scope);
END
$$;

REVOKE ALL ON FUNCTION synchro._cursor(uuid, text, text, text) FROM PUBLIC;

-- The role that called into the pack. Inside a SECURITY DEFINER function current_user is
-- the owner; the session's active role is what SET ROLE set (the "role" setting, which
-- no SECURITY DEFINER function can change), or the session user. A SECURITY DEFINER
-- function of another role between the session and the pack is not seen: its own
-- caller's role is checked instead (docs/security.md).
CREATE OR REPLACE FUNCTION synchro._invoker() RETURNS name
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
  SELECT coalesce(nullif(pg_catalog.current_setting('role'), 'none'), session_user)::name
$$;

REVOKE ALL ON FUNCTION synchro._invoker() FROM PUBLIC;

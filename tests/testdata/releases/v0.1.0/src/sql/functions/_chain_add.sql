-- The step of rebuild's checksum chain (synchro._chain_agg): h = SHA-256(h ‖ piece),
-- starting from seed when no row was folded in yet (state NULL). Not STRICT, so the
-- aggregate can take its seed as an argument (a session's running checksum).
CREATE OR REPLACE FUNCTION synchro._chain_add(h bytea, seed bytea, piece bytea) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
-- PL/pgSQL rather than SQL: as an aggregate's transition function a SQL function is
-- not inlined, and its per-call overhead is about twice PL/pgSQL's simple expression.
AS $$
BEGIN
  RETURN pg_catalog.sha256(coalesce(h, seed) || piece);
END
$$;

REVOKE ALL ON FUNCTION synchro._chain_add(bytea, bytea, bytea) FROM PUBLIC;

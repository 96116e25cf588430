-- The index key of a scope or rule value: SHA-256 of its bytes, exactly the
-- expression of the stored generated columns membership.scope_hash,
-- effect.scope_hash and rule_value.value_hash (migration 00004: btree entries cannot
-- hold long values). A queried value is compared by this hash for the index range and
-- by its full text for equality. Inlined by the planner (one immutable expression).
CREATE OR REPLACE FUNCTION synchro._scope_hash(v text) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT pg_catalog.sha256(pg_catalog.decode(pg_catalog.replace(v, E'\\', E'\\\\'), 'escape'))
$$;

REVOKE ALL ON FUNCTION synchro._scope_hash(text) FROM PUBLIC;

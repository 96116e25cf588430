-- The tables a reset stages and installs: the projected state that materialization
-- keeps per stream (everything else it writes is keyed by stream generation, or is
-- push-side state that a reset must not fork). progress is staged too, for the
-- catch-up's own commit order and boundary, but activation rewrites the live row
-- instead of installing it.
CREATE OR REPLACE FUNCTION synchro._reset_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE
AS $$
  SELECT ARRAY['projection', 'rule_value', 'membership', 'progress']
$$;

REVOKE ALL ON FUNCTION synchro._reset_tables() FROM PUBLIC;

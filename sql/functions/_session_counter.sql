-- A counter the pack keeps in a setting of the session (set_config, not local: it
-- outlives the transaction that set it, and a rolled-back one takes its update back).
-- Anything that is not a plain number, whoever set it, counts as 0: the runner's own
-- session may set the setting to any text, and that must not make materialization
-- fail; at worst it changes when the session plans again (synchro.materialize_batch).
CREATE OR REPLACE FUNCTION synchro._session_counter(name text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog
AS $$
  SELECT CASE WHEN v ~ '^[0-9]{1,18}$' THEN v::bigint ELSE 0 END
    FROM (SELECT pg_catalog.current_setting(name, true) AS v) s
$$;

REVOKE ALL ON FUNCTION synchro._session_counter(text) FROM PUBLIC;

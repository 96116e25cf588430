-- The server key's HMAC pads, for the runner only: it authenticates the pack's logical
-- messages before staging them (runner/msgauth, docs/wire-format.md "mac").
--
-- Materialization used to recompute every message's MAC in SQL (about 26 µs per fence,
-- 13 % of a batch); the runner does it in about a microsecond. Reading the key adds no
-- power to synchro_runner: the role may already stage any row and call
-- synchro.materialize_batch, which writes every synchro table as the owner. No other
-- role may call this (the key also signs cursors and rebuild tokens).
CREATE OR REPLACE FUNCTION synchro.runner_message_key()
RETURNS TABLE (inner_pad bytea, outer_pad bytea)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT k.inner_pad, k.outer_pad FROM synchro.server_key k
$$;

REVOKE ALL ON FUNCTION synchro.runner_message_key() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_message_key() TO synchro_runner;

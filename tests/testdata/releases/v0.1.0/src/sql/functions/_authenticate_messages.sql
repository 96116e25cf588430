-- Drops every staged logical message that the pack did not emit itself (issue 13).
--
-- pg_logical_emit_message is executable by PUBLIC: any role can put a message with a
-- "synchro." prefix into the WAL, inside or outside a transaction. Such a message
-- must never stop the stream. Only a transactional message with a known prefix whose
-- "mac" matches synchro._message_mac under the server key counts; everything else is
-- removed from pg_temp.synchro_stage before materialization counts or pairs fences,
-- as if it had never been emitted. A genuine fence that mismatches its row event is
-- still poison (ADR 001's bypass rule): authentication only decides which messages
-- are the pack's.
--
-- The number dropped is left in the transaction-local setting
-- synchro.ignored_messages for the runner's metrics (it reads it right after
-- synchro.materialize_batch). Called by synchro.materialize_batch (SECURITY DEFINER, pinned
-- search_path), so it runs as the owner and may read the server key.
CREATE OR REPLACE FUNCTION synchro._authenticate_messages() RETURNS integer
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  n integer;
BEGIN
  -- synchro._message_mac inlined, with the key read once for the whole statement
  -- (a call per message would read it per message).
  DELETE FROM pg_temp.synchro_stage s
   USING synchro.server_key k
   WHERE s.kind = 'M'
     AND (s.prefix IS NULL OR s.prefix NOT IN ('synchro.fence', 'synchro.registry')
          OR s.content IS NULL OR jsonb_typeof(s.content) IS DISTINCT FROM 'object'
          OR jsonb_typeof(s.content -> 'mac') IS DISTINCT FROM 'string'
          OR (s.content ->> 'mac') IS DISTINCT FROM encode(substr(sha256(
               k.outer_pad || sha256(k.inner_pad || '\x73796e6368726f2e6d736700'::bytea || convert_to(s.prefix, 'UTF8')
                             || '\x00'::bytea || convert_to(synchro._message_body(s.prefix, s.content), 'UTF8'))),
               1, 16), 'hex'));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('synchro.ignored_messages', n::text, true);
  RETURN n;
END
$$;

REVOKE ALL ON FUNCTION synchro._authenticate_messages() FROM PUBLIC;

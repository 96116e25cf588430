-- The MAC of one of the pack's own logical messages (docs/wire-format.md, "mac").
--
-- pg_logical_emit_message is executable by PUBLIC, so a message's prefix says nothing
-- about who emitted it. Only the fence triggers and activate_registry, running as the
-- pack's owner, can read synchro.server_key; the runner's materialization (also the
-- owner) recomputes this MAC and drops every message without a matching one before it
-- pairs anything (synchro._authenticate_messages).
--
-- HMAC-SHA-256 (RFC 2104 on the core sha256(), with the key's precomputed pads) over
--   'synchro.msg' 0x00 prefix 0x00 body
-- where body is the message object without its "mac" field as jsonb renders it (the
-- canonical text, so the verifier gets the same bytes back from the staged jsonb),
-- truncated to its first 16 bytes (RFC 2104 section 5 allows truncation to half the
-- output), lowercase hex. The two NUL bytes keep it apart from cursor and rebuild
-- token MACs (synchro._mac: text, one NUL, text): neither can stand for the other.
--
-- Called from the generated fence triggers, which run as the owner and may run with
-- the writer's search_path: every function, operator and type below is therefore
-- schema-qualified, so no object of the caller's can see the key. No SET clause: it
-- would cost a GUC save/restore on every fenced row.
CREATE OR REPLACE FUNCTION synchro._message_mac(prefix text, body jsonb) RETURNS text
LANGUAGE sql STABLE
AS $$
  SELECT pg_catalog.encode(pg_catalog.substr(
           pg_catalog.sha256(k.outer_pad OPERATOR(pg_catalog.||) pg_catalog.sha256(
             k.inner_pad
             OPERATOR(pg_catalog.||) '\x73796e6368726f2e6d736700'::pg_catalog.bytea -- 'synchro.msg' 0x00
             OPERATOR(pg_catalog.||) pg_catalog.convert_to(prefix, 'UTF8')
             OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea
             OPERATOR(pg_catalog.||) pg_catalog.convert_to(body::pg_catalog.text, 'UTF8'))),
           1, 16), 'hex')
    FROM synchro.server_key k
$$;

REVOKE ALL ON FUNCTION synchro._message_mac(text, jsonb) FROM PUBLIC;

-- The MAC of one of the pack's own logical messages (docs/wire-format.md, "mac").
--
-- pg_logical_emit_message is executable by PUBLIC, so a message's prefix says nothing
-- about who emitted it. Only the fence triggers and activate_registry, running as the
-- pack's owner, can read synchro.server_key; the runner verifies the MAC before it
-- stages a message and drops every message without a matching one (runner/msgauth,
-- which reads the key's pads through synchro.runner_message_key). This function is
-- the reference its tests compare against.
--
--   mac = lowercase hex of the first 16 bytes of
--         HMAC-SHA-256(server key, 'synchro.msg' 0x00 prefix 0x00 body)
--
-- (RFC 2104 on the core sha256() with the key's precomputed pads; RFC 2104 section 5
-- allows truncation to half the output.) body is synchro._message_body: the message's
-- fields, each length-prefixed. The two NUL bytes keep it apart from cursor and
-- rebuild-token MACs (synchro._mac: text, one NUL, text): neither can stand for the
-- other. The generated fence computes the same expression inline (a function call per
-- fenced row costs more than the MAC itself).
--
-- Every function, operator and type below is schema-qualified: no object of a caller's
-- search_path may ever see the key's pads.
CREATE OR REPLACE FUNCTION synchro._message_mac(prefix text, body text) RETURNS text
LANGUAGE sql STABLE
AS $$
  SELECT pg_catalog.encode(pg_catalog.substr(
           pg_catalog.sha256(k.outer_pad OPERATOR(pg_catalog.||) pg_catalog.sha256(
             k.inner_pad
             OPERATOR(pg_catalog.||) pg_catalog.decode('73796e6368726f2e6d736700', 'hex') -- 'synchro.msg' 0x00
             OPERATOR(pg_catalog.||) pg_catalog.convert_to(prefix, 'UTF8')
             OPERATOR(pg_catalog.||) pg_catalog.decode('00', 'hex')
             OPERATOR(pg_catalog.||) pg_catalog.convert_to(body, 'UTF8'))),
           1, 16), 'hex')
    FROM synchro.server_key k
$$;

REVOKE ALL ON FUNCTION synchro._message_mac(text, text) FROM PUBLIC;

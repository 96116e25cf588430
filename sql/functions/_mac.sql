-- HMAC-SHA-256 over payload || 0x00 || scope with the server key (RFC 2104 on the
-- core sha256(); the key's pads are derived at install).
CREATE OR REPLACE FUNCTION synchro._mac(payload text, scope text) RETURNS bytea
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
  SELECT sha256(k.outer_pad || sha256(k.inner_pad || convert_to(payload, 'UTF8') || decode('00', 'hex') || convert_to(scope, 'UTF8')))
    FROM synchro.server_key k
$$;

REVOKE ALL ON FUNCTION synchro._mac(text, text) FROM PUBLIC;

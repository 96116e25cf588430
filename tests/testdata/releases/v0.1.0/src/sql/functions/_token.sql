-- Authenticated opaque tokens (cursors and rebuild sessions): base64url of the payload
-- followed by HMAC-SHA-256(server key, payload || 0x00 || scope). Binding the scope
-- into the MAC (instead of the payload) keeps tokens short and makes a token presented
-- for another scope fail authentication like a forged one.
CREATE OR REPLACE FUNCTION synchro._token(payload text, scope text) RETURNS text
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
  SELECT rtrim(translate(encode(convert_to(payload, 'UTF8') || synchro._mac(payload, scope), 'base64'), E'+/\n', '-_'), '=')
$$;

REVOKE ALL ON FUNCTION synchro._token(text, text) FROM PUBLIC;

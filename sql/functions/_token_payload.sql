-- Verifies a token for a scope and returns its payload, or NULL when it is malformed,
-- forged, tampered with or bound to another scope. Callers turn NULL into one SY400
-- without saying which check failed. The MACs are compared through another hash, so
-- the comparison's timing says nothing about the expected MAC.
CREATE OR REPLACE FUNCTION synchro._token_payload(token text, scope text) RETURNS text
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
DECLARE
  raw bytea;
  payload text;
BEGIN
  IF token IS NULL OR length(token) NOT BETWEEN 44 AND 16384 OR token !~ '^[A-Za-z0-9_-]+$' THEN
    RETURN NULL;
  END IF;
  BEGIN
    raw := decode(translate(token, '-_', '+/') || repeat('=', (4 - length(token) % 4) % 4), 'base64');
    payload := convert_from(substr(raw, 1, length(raw) - 32), 'UTF8');
  EXCEPTION WHEN data_exception OR character_not_in_repertoire OR untranslatable_character THEN
    RETURN NULL;
  END;
  -- The decoder ignores the unused low bits of a token's last character, so up to 16
  -- spellings decode to one token's bytes: only the spelling synchro._token writes is
  -- that token (a tampered one is refused, whatever it decodes to).
  IF length(raw) <= 32
     OR rtrim(translate(encode(raw, 'base64'), E'+/\n', '-_'), '=') <> token
     OR sha256(substr(raw, length(raw) - 31)) <> sha256(synchro._mac(payload, scope)) THEN
    RETURN NULL;
  END IF;
  RETURN payload;
END
$$;

REVOKE ALL ON FUNCTION synchro._token_payload(text, text) FROM PUBLIC;

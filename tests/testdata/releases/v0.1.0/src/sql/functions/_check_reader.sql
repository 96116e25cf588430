-- The argument checks pull and rebuild share (SY400, before anything else): a client
-- id and a scope of bounded length, and the page limit within the contract's range.
CREATE OR REPLACE FUNCTION synchro._check_reader(client_id text, scope text, page_limit int, limit_name text)
RETURNS void
LANGUAGE plpgsql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
BEGIN
  IF client_id IS NULL OR length(client_id) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'invalid_argument: client_id must be 1 to 256 characters' USING ERRCODE = 'SY400';
  END IF;
  IF scope IS NULL OR length(scope) NOT BETWEEN 1 AND 512 THEN
    RAISE EXCEPTION 'invalid_argument: scope must be 1 to 512 characters' USING ERRCODE = 'SY400';
  END IF;
  IF page_limit IS NULL OR page_limit NOT BETWEEN 1 AND 10000 THEN
    RAISE EXCEPTION 'invalid_argument: % must be 1 to 10000', limit_name USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._check_reader(text, text, int, text) FROM PUBLIC;

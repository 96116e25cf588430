-- Records a decided mutation's outcome, kept as long as the client exists (retention of
-- the change stream never touches it).
CREATE OR REPLACE FUNCTION synchro._push_record(client_id text, mutation_id uuid, content_hash text, outcome jsonb)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  INSERT INTO synchro.mutation_outcome (client_id, mutation_id, content_hash, outcome)
  VALUES (client_id, mutation_id, decode(content_hash, 'hex'), outcome);
END
$$;

REVOKE ALL ON FUNCTION synchro._push_record(text, uuid, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_record(text, uuid, text, jsonb) TO synchro_app;

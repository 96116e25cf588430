-- Regenerates the fence function and triggers of every registration of the active
-- generation. Every install runs it after re-applying the function files, so a change
-- to the fence template (synchro._fence_source) reaches existing relations.
CREATE OR REPLACE FUNCTION synchro._refresh_fences() RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  rid bigint;
  n int := 0;
BEGIN
  FOR rid IN
    SELECT reg.relation_id FROM synchro.registration reg
      JOIN synchro.registry_generation g ON g.generation = reg.generation AND g.state = 'active'
      JOIN synchro.relation r ON r.relation_id = reg.relation_id
     WHERE EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = r.relid)
     ORDER BY reg.relation_id
  LOOP
    PERFORM synchro._install_triggers(rid);
    n := n + 1;
  END LOOP;
  RETURN n;
END
$$;

REVOKE ALL ON FUNCTION synchro._refresh_fences() FROM PUBLIC;

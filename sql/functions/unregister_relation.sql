-- Stages the removal of a registered relation (synced table or dependency) from the
-- pending registry generation, with its scope rules. At activation its fence triggers
-- go, it leaves the publication, and the runner drops its projection, rule index and
-- membership when it materializes the activation (synchro._bootstrap_merge); cursors
-- and rebuild sessions of the scope prefixes its rules named become stale (SY409).
-- relation_id and table_id stay reserved: they are never reused.
CREATE OR REPLACE FUNCTION synchro.unregister_relation(relation_id bigint) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint := synchro._pending_generation();
BEGIN
  IF NOT EXISTS (SELECT 1 FROM synchro.registration reg
                  WHERE reg.generation = g AND reg.relation_id = unregister_relation.relation_id) THEN
    RAISE EXCEPTION 'unregister refused: relation_id is not registered in the pending generation' USING ERRCODE = 'SY400';
  END IF;
  -- A dependency that another table's rule reaches through cannot go first.
  IF EXISTS (SELECT 1 FROM synchro.scope_rule s
              WHERE s.generation = g AND s.via_relation_id = unregister_relation.relation_id
                AND s.relation_id <> unregister_relation.relation_id) THEN
    RAISE EXCEPTION 'unregister refused: a scope rule of another table uses this dependency as via; remove those rules first'
      USING ERRCODE = 'SY400';
  END IF;
  DELETE FROM synchro.scope_rule s WHERE s.generation = g AND s.relation_id = unregister_relation.relation_id;
  DELETE FROM synchro.relation_rebind b WHERE b.generation = g AND b.relation_id = unregister_relation.relation_id;
  DELETE FROM synchro.registration reg WHERE reg.generation = g AND reg.relation_id = unregister_relation.relation_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.unregister_relation(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.unregister_relation(bigint) TO synchro_operator;

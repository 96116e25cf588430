-- Puts the staged tables of a reset under the live names (stage_in = true) or back
-- (false), inside the caller's transaction. Between the two, every statement of the
-- transaction that names synchro.projection, synchro.rule_value, synchro.membership or
-- synchro.progress reaches the stage: this is how a reset's baseline and catch-up run
-- the ordinary materialization code (synchro.materialize_batch and everything below it)
-- unchanged on the staged state. PostgreSQL re-resolves the names of cached plans on
-- the relation invalidation a schema move sends. Other sessions never see the stage:
-- the moves take ACCESS EXCLUSIVE locks held to commit, by which time the names are
-- back. The locks are taken first and all at once, progress first as pull and rebuild
-- read it first, so a reader waits instead of deadlocking.
CREATE OR REPLACE FUNCTION synchro._reset_swap(stage_in boolean) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
DECLARE
  t text;
BEGIN
  LOCK TABLE synchro.progress, synchro.membership, synchro.projection, synchro.rule_value IN ACCESS EXCLUSIVE MODE;
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    IF stage_in THEN
      EXECUTE format('ALTER TABLE synchro.%I SET SCHEMA synchro_retired', t);
      EXECUTE format('ALTER TABLE synchro_reset.%I SET SCHEMA synchro', t);
    ELSE
      EXECUTE format('ALTER TABLE synchro.%I SET SCHEMA synchro_reset', t);
      EXECUTE format('ALTER TABLE synchro_retired.%I SET SCHEMA synchro', t);
    END IF;
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._reset_swap(boolean) FROM PUBLIC;

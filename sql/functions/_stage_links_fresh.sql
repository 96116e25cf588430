-- Adds the column fresh (migration 00019) to the session's pg_temp.synchro_b_links when
-- the session opened its work tables before an upgrade added it. Called once per
-- session where it is needed (not from synchro.runner_stage_open, which runs every
-- batch: a catalog query per one-transaction batch at low load): when the session's
-- links function is made (synchro._mat_links_fn), and by a set-based run without row
-- events, which makes none (synchro._mat_run_links).
CREATE OR REPLACE FUNCTION synchro._stage_links_fresh() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only under the pinned search_path of synchro.materialize_batch.
AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                  WHERE a.attrelid = 'pg_temp.synchro_b_links'::pg_catalog.regclass AND a.attname = 'fresh') THEN
    ALTER TABLE pg_temp.synchro_b_links ADD COLUMN fresh boolean;
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_links_fresh() FROM PUBLIC;

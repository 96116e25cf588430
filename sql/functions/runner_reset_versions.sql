-- Row versions for the registered rows that have none, before a stream reset's
-- candidate slot is created: one chunk of keys after (after_relation, after) in
-- (relation_id, key) order over the active generation's relations; returns the
-- chunk's last position, both NULL when every relation is done. A row has no version
-- only when it was written past the fence (session_replication_role = replica, a
-- disabled trigger): the poison a reset exists to recover from (docs/reset.md). The
-- baseline refuses a row without a version and never invents one (synchro._baseline_rows),
-- so these committed, short transactions give them one first, as the projection
-- bootstrap does (synchro.runner_bootstrap_versions), and the candidate's snapshot, taken
-- after, holds them. Before this the reset refused such a row on every attempt
-- (TestResetRecoversBypassedInsert). lock_timeout: a row a writer holds ends the chunk
-- (55P03, retried by the runner) instead of making the writer wait.
CREATE OR REPLACE FUNCTION synchro.runner_reset_versions(
  reset_id uuid, after_relation bigint, after text, chunk int, OUT relation_id bigint, OUT last text)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Reads registered tables planned as the owner: no CHECK constraint of theirs folded
-- (synchro._planned_app_code).
SET constraint_exclusion TO 'partition'
SET lock_timeout TO '200ms'
AS $$
DECLARE
  reg bigint;
  r   synchro.relation;
  k   text;
BEGIN
  IF chunk IS NULL OR chunk < 1 OR chunk > 100000 THEN
    RAISE EXCEPTION 'runner_reset_versions: chunk out of range' USING ERRCODE = 'SY400';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM synchro.reset x WHERE x.reset_id = runner_reset_versions.reset_id AND x.phase = 'staging') THEN
    RAISE EXCEPTION 'runner_reset_versions: refused outside phase staging' USING ERRCODE = 'SY400';
  END IF;
  SELECT g.generation INTO reg FROM synchro.registry_generation g WHERE g.state = 'active';
  FOR r IN SELECT rel.* FROM synchro.registration x JOIN synchro.relation rel ON rel.relation_id = x.relation_id
            WHERE x.generation = reg AND (after_relation IS NULL OR rel.relation_id >= after_relation)
            ORDER BY rel.relation_id LOOP
    k := CASE WHEN r.relation_id = after_relation THEN after END;
    last := synchro._version_chunk(r.relation_id, reg, k, chunk);
    IF last IS NOT NULL THEN
      relation_id := r.relation_id;
      RETURN;
    END IF;
  END LOOP;
  relation_id := NULL;
  last := NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_reset_versions(uuid, bigint, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_reset_versions(uuid, bigint, text, int) TO synchro_runner;

-- Creates pg_temp.synchro_b_points, the membership timeline of a set-based run that
-- holds dependency changes (synchro._mat_run_points): one point per (transaction, synced
-- row) where the row's scopes may change, either a link of its own (touched) or a
-- dependency change of that transaction that reaches it. Owned by the pack's owner, no
-- grant to the runner's role. Called by synchro.runner_stage_open when the session has
-- none (a new session, or one that opened its work tables before migration 00029).
CREATE OR REPLACE FUNCTION synchro._stage_points_create() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro.runner_stage_open, which pinned search_path.
AS $$
BEGIN
  CREATE TEMP TABLE synchro_b_points (
    t int, relation_id bigint, pk text, pk_int bigint, table_id text, op text, version text,
    image jsonb, image_bytes int,
    event_ordinal int,   -- the effect's event: the greater of the row's own and the reaching ones
    touched boolean,     -- a link of the row (upserts in every scope), not only reached
    fresh boolean,       -- the row's link is fresh (synchro._mat_links_fn): no membership to read
    point int,           -- 1, 2, ... along the run, per row
    last boolean         -- the row's last point: membership as it leaves it
  ) ON COMMIT PRESERVE ROWS;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_points_create() FROM PUBLIC;

-- Creates pg_temp.synchro_rel_ok, the session's memory of the Relation shapes that
-- synchro._mat_run_check_relations found to be exactly the registered relation of a registry
-- generation (a generation's registrations never change, and a relation's row changes
-- only when an activation starts a new generation, as rebind_relation's does, so a
-- shape once checked stays checked for that generation). Rows of a batch that rolls back go
-- with it. Only the pack's owner writes it: no grant to the runner's role, which
-- could otherwise declare a drifted shape checked.
CREATE OR REPLACE FUNCTION synchro._stage_rel_ok_create() RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro.runner_stage_open, which pinned search_path.
AS $$
BEGIN
  CREATE TEMP TABLE synchro_rel_ok (
    generation bigint NOT NULL,
    relid      oid NOT NULL,
    nspname    text NOT NULL,
    relname    text NOT NULL,
    replident  "char" NOT NULL,
    col_names  text[] NOT NULL,
    col_types  oid[] NOT NULL,
    col_keys   boolean[] NOT NULL
  ) ON COMMIT PRESERVE ROWS;
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_rel_ok_create() FROM PUBLIC;

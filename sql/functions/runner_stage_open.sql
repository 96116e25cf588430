-- Creates the session's staging and work tables (temporary, owned by the pack's owner,
-- emptied at every commit). The runner COPYs each source transaction's events into
-- pg_temp.synchro_stage, then calls synchro.materialize once: the events stream into
-- the materialization transaction instead of travelling as one giant argument.
CREATE OR REPLACE FUNCTION synchro.runner_stage_open() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  IF to_regclass('pg_temp.synchro_stage') IS NOT NULL THEN
    -- Made by an earlier call, unless the session made its own tables of these names
    -- first: materialize writes them with the owner's rights, so a table of the caller
    -- (with its triggers or policies) would run the caller's code as the owner.
    IF EXISTS (SELECT 1 FROM pg_class c
                WHERE c.relnamespace = pg_my_temp_schema() AND c.relname LIKE 'synchro\_%'
                  AND c.relowner <> current_user::regrole) THEN
      RAISE EXCEPTION 'runner refused: the session holds temporary synchro_ tables it made itself'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN;
  END IF;
  CREATE TEMP TABLE synchro_stage (
    seq           int NOT NULL,    -- position in decoded order within the source transaction
    kind          "char" NOT NULL, -- R relation, I/U/D row, T truncate, M message
    event_ordinal int,             -- I/U/D/T: row-event ordinal
    relid         oid,
    nspname       text,
    relname       text,
    replident     "char",
    col_names     text[],
    col_types     oid[],
    col_keys      boolean[],
    new_row       jsonb,
    old_row       jsonb,
    toast         text[],
    truncated     oid[],
    prefix        text,
    content       jsonb
  ) ON COMMIT DELETE ROWS;
  EXECUTE format('GRANT INSERT, SELECT ON TABLE pg_temp.synchro_stage TO %I', session_user);

  -- Work tables of synchro.materialize and synchro.runner_baseline.
  CREATE TEMP TABLE synchro_w_rows (
    seq int, event_ordinal int, op text, relation_id bigint, registration_kind text, table_id text,
    key_column name, key_type text, pk text, reg_gen bigint, new_row jsonb, toast text[],
    grp_rank int, fence_id uuid, version text
  ) ON COMMIT DELETE ROWS;
  CREATE TEMP TABLE synchro_w_final (
    relation_id bigint, pk text, pk_int bigint, registration_kind text, table_id text, op text,
    new_row jsonb, toast text[], version text, event_ordinal int, image jsonb,
    PRIMARY KEY (relation_id, pk)
  ) ON COMMIT DELETE ROWS;
  CREATE TEMP TABLE synchro_w_impacted (
    relation_id bigint, pk text, event_ordinal int, touched boolean,
    PRIMARY KEY (relation_id, pk)
  ) ON COMMIT DELETE ROWS;
  CREATE TEMP TABLE synchro_w_scopes (
    relation_id bigint, pk text, scope text
  ) ON COMMIT DELETE ROWS;
  CREATE TEMP TABLE synchro_w_oldscopes (
    relation_id bigint, pk text, scope text
  ) ON COMMIT DELETE ROWS;
  CREATE TEMP TABLE synchro_w_depvals (
    relation_id bigint, column_name name, value text, event_ordinal int
  ) ON COMMIT DELETE ROWS;
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_stage_open() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_stage_open() TO synchro_runner;

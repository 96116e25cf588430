-- Creates the session's staging and work tables (temporary, owned by the pack's owner).
-- They keep their rows across commits (ON COMMIT PRESERVE ROWS) and are emptied by
-- synchro._stage_reset at the end of every batch: ON COMMIT DELETE ROWS truncated a
-- dozen tables and rebuilt their indexes at every commit, which cost about 10 ms per
-- batch and invalidated every cached plan that uses them (so each batch replanned its
-- statements). A failed batch rolls its rows back with it. The runner COPYs the events of a batch of consecutive
-- source transactions into pg_temp.synchro_stage (txn = the transaction's index in
-- the batch), then calls synchro.materialize_batch once: the events stream into the
-- materialization transaction instead of travelling as one giant argument.
CREATE OR REPLACE FUNCTION synchro.runner_stage_open() RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  declared  text := current_setting('synchro.runner_pack', true);
  installed bigint;
BEGIN
  -- A runner declares its release's newest migration on every session it opens
  -- (synchro.runner_pack, runner/conn.go). One older than the pack installed here was
  -- left running while a deploy migrated the pack past it: it stages and calls as its
  -- own release does, and the functions here are another release's, whose calls may
  -- succeed and mean something else. Every function that takes what a runner staged
  -- (materialize_batch, _prepare, _write, the baselines, the bootstrap stage and
  -- runner_idle's merge) opens the session's tables here first, so such a runner is
  -- refused here before anything it staged is read, in the statement that would use
  -- the new functions: SYW02 (runner_release), transient for the runner, which waits
  -- for its replacement (synchro.runner_pack_version, TestRunnerOlderThanThePack). A
  -- session without the setting is not a runner's (psql, the tests' direct calls).
  IF declared <> '' THEN
    SELECT max(v.version_id) INTO installed FROM synchro.goose_version v WHERE v.is_applied;
    IF declared !~ '^[0-9]{1,18}$' OR declared::bigint < installed THEN
      RAISE EXCEPTION 'runner_release: the runner''s release is older than the pack installed (migration %)', installed
        USING ERRCODE = 'SYW02';
    END IF;
  END IF;
  IF to_regclass('pg_temp.synchro_stage') IS NOT NULL THEN
    -- Made by an earlier call, unless the session made its own tables of these names
    -- first: materialize writes them with the owner's rights, so a table of the caller
    -- (with its triggers or policies) would run the caller's code as the owner.
    IF EXISTS (SELECT 1 FROM pg_class c
                WHERE c.relnamespace = pg_my_temp_schema() AND c.relname LIKE E'synchro\\_%'
                  AND c.relowner <> current_user::regrole) THEN
      RAISE EXCEPTION 'runner refused: the session holds temporary synchro_ tables it made itself'
        USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF to_regclass('pg_temp.synchro_rel_ok') IS NULL THEN
      -- A session that opened its tables before an upgrade added this one.
      PERFORM synchro._stage_rel_ok_create();
    END IF;
    IF to_regclass('pg_temp.synchro_b_points') IS NULL THEN
      -- Likewise (migration 00029).
      PERFORM synchro._stage_points_create();
    END IF;
    RETURN;
  END IF;
  CREATE TEMP TABLE synchro_stage (
    txn           int NOT NULL,    -- index of the source transaction in the batch, from 0
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
    -- M: the message's fields, parsed strictly and authenticated by the runner
    -- (runner/msgauth): a synchro.fence's (f_*) or a synchro.registry's (a_*).
    -- Typed columns, so materialization never re-parses JSON (issue 7).
    f_kind        text,
    f_relation_id bigint,
    f_schema      text,
    f_table       text,
    f_op          text,
    f_old_key     text,
    f_new_key     text,
    f_version     text,
    f_fence_id    uuid,
    f_ordinal     bigint,
    f_table_id    text,
    a_generation  bigint,
    a_previous    bigint,
    -- I/U/D and fence M rows: the runner's numbering of the transaction's row events
    -- and of its fences, each from 1 in decoded order (a fence out of ordinal order,
    -- and every later one, unnumbered): synchro._mat_run_pair_fences pairs by it.
    pair_no       int
  ) ON COMMIT PRESERVE ROWS;
  EXECUTE format('GRANT INSERT, SELECT ON TABLE pg_temp.synchro_stage TO %I', session_user);

  -- Work tables of synchro._materialize_txn and synchro.runner_baseline.
  CREATE TEMP TABLE synchro_w_rows (
    seq int, event_ordinal int, op text, relation_id bigint, registration_kind text, table_id text,
    key_column name, key_type text, pk text, reg_gen bigint, new_row jsonb, toast text[],
    grp_rank int, fence_id uuid, version text
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_w_final (
    relation_id bigint, pk text, pk_int bigint, registration_kind text, table_id text, op text,
    new_row jsonb, toast text[], version text, event_ordinal int, image jsonb,
    PRIMARY KEY (relation_id, pk)
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_w_impacted (
    relation_id bigint, pk text, event_ordinal int, touched boolean,
    PRIMARY KEY (relation_id, pk)
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_w_scopes (
    relation_id bigint, pk text, scope text
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_w_oldscopes (
    relation_id bigint, pk text, scope text
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_w_depvals (
    relation_id bigint, column_name name, value text, event_ordinal int
  ) ON COMMIT PRESERVE ROWS;

  PERFORM synchro._stage_rel_ok_create();

  -- Work tables of the set-based path (synchro._materialize_run), keyed by the
  -- transaction's index t in the batch.
  CREATE TEMP TABLE synchro_b_txn (
    t int PRIMARY KEY, commit_lsn pg_lsn, end_lsn pg_lsn, xid bigint, commit_time timestamptz, n_events int,
    n_fences int
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_b_rows (
    t int, seq int, event_ordinal int, op text, relation_id bigint, table_id text, key_column name,
    key_type text, pk text, new_row jsonb, old_pk text, fence_id uuid, version text
  ) ON COMMIT PRESERVE ROWS;
  -- One link per (transaction, row): the row's last event in that transaction. No
  -- index: every join of the run over it is a hash join, and the statement that
  -- writes it makes (relation_id, pk, t) unique (DISTINCT ON), so a primary key
  -- only cost an index insertion per link. fresh: the row's only event in the run
  -- inserts it (synchro._mat_links_fn).
  CREATE TEMP TABLE synchro_b_links (
    t int, relation_id bigint, pk text, pk_int bigint, table_id text, key_type text, op text,
    version text, event_ordinal int, image jsonb, image_bytes int, link int, last boolean, fresh boolean
  ) ON COMMIT PRESERVE ROWS;
  -- The row-image SQL of each (relation, registry generation, source), made once per
  -- session by synchro._image_sql: registrations in effect never change.
  CREATE TEMP TABLE synchro_image_sql (
    relation_id bigint, generation bigint, src text, live boolean, sql text NOT NULL,
    PRIMARY KEY (relation_id, generation, src, live)
  ) ON COMMIT PRESERVE ROWS;
  CREATE TEMP TABLE synchro_b_scopes (
    t int, relation_id bigint, pk text, scope text, scope_hash bytea
  ) ON COMMIT PRESERVE ROWS;
  -- The memberships the run's rows held before it (mctid: the membership row).
  CREATE TEMP TABLE synchro_b_old (
    relation_id bigint, pk text, scope text, scope_hash bytea, mctid tid
  ) ON COMMIT PRESERVE ROWS;
  PERFORM synchro._stage_points_create();
END
$$;

REVOKE ALL ON FUNCTION synchro.runner_stage_open() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_stage_open() TO synchro_runner;

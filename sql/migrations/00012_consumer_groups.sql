-- +goose Up
-- Consumer groups (CONTRACT.md "Consumer groups"; issue 11; docs/sql/consumer_groups.md).
-- Function bodies are in sql/functions.

-- The role of server-side consumers. Cluster-wide like the others (migration 00001):
-- a second database of the cluster finds it there already.
-- +goose StatementBegin
DO $roles$
BEGIN
  -- Only what is missing is made (as in 00001: a database owner without CREATEROLE
  -- installs once the roles exist).
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'synchro_consumer') THEN
    BEGIN
      CREATE ROLE synchro_consumer NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;
    END;
  END IF;
  -- A consumer may do everything an application may.
  IF NOT pg_catalog.pg_has_role('synchro_consumer', 'synchro_app', 'MEMBER') THEN
    BEGIN
      GRANT synchro_app TO synchro_consumer;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;
    END;
  END IF;
END
$roles$;
-- +goose StatementEnd
GRANT USAGE ON SCHEMA synchro TO synchro_consumer;

-- The per-transaction change record the groups read: one row per synced row a source
-- transaction touched (its last event there decides), with the row image that
-- materialization rendered for it. Pull effects are per scope (a row without a scope has
-- none) and projections keep only the latest image, so neither can serve a group.
-- Written by the same materialization transaction as everything else
-- (synchro._mat_changes), compacted by synchro.compact (synchro._consumer_compact).
-- The primary key is the read order: (commit_lsn, event_ordinal) within a generation.
CREATE TABLE synchro.change (
  stream_generation bigint      NOT NULL,
  commit_lsn        pg_lsn      NOT NULL,
  event_ordinal     int         NOT NULL, -- the row's last event in the transaction
  commit_time       timestamptz NOT NULL,
  relation_id       bigint      NOT NULL,
  table_id          text        NOT NULL,
  pk                text        NOT NULL,
  op                text        NOT NULL CONSTRAINT change_op CHECK (op IN ('upsert', 'delete')),
  version           text        NOT NULL,
  image             jsonb,
  PRIMARY KEY (stream_generation, commit_lsn, event_ordinal),
  CONSTRAINT change_upsert_has_image CHECK ((op = 'upsert') = (image IS NOT NULL))
);

-- What compaction removed from synchro.change, per stream generation: every change at
-- or below horizon_commit_lsn is gone. Separate from synchro.retention (pull effects):
-- a slow group holds back only its own record, never the pull effects.
CREATE TABLE synchro.change_retention (
  stream_generation  bigint PRIMARY KEY REFERENCES synchro.stream_generation,
  horizon_commit_lsn pg_lsn NOT NULL,
  updated_at         timestamptz NOT NULL DEFAULT now()
);

-- One row per group, removed ones included (the tombstone keeps the name taken).
-- Position: transaction_end(checkpoint_lsn) of stream_generation; checkpoint_lsn equal to
-- the generation's start LSN is generation_start (no transaction commits at it).
-- stream_generation NULL: created before the stream existed, starts at the first
-- generation's start (adopted by the group's first call).
CREATE TABLE synchro.consumer_group_state (
  name              text PRIMARY KEY CONSTRAINT consumer_group_name CHECK (name ~ '^[a-z][a-z0-9_]{0,62}$'),
  -- Fencing tokens of the group are group_no * 2^32 + 1, + 2, ...: a token of another
  -- group never equals this group's, so a foreign token is refused like a stale one.
  group_no          bigint GENERATED ALWAYS AS IDENTITY UNIQUE CONSTRAINT consumer_group_no CHECK (group_no < 2147483648),
  table_ids         text[], -- NULL: every synced table
  stream_generation bigint,
  checkpoint_lsn    pg_lsn,
  acked_at          timestamptz,
  -- Fencing: last_token only grows; lease_token is the current lease's (NULL: none).
  last_token        bigint NOT NULL DEFAULT 0,
  lease_owner       text,
  lease_token       bigint,
  lease_expires_at  timestamptz,
  -- The end of the outstanding batch: the last position the latest read of the current
  -- owner handed out (ack accepts positions up to it). NULL: nothing outstanding.
  handed_through    pg_lsn,
  created_at        timestamptz NOT NULL DEFAULT now(),
  removed_at        timestamptz,
  -- An operator's explicit destructive release: the group no longer holds back
  -- compaction; once compaction passes its checkpoint it reads SY409.
  retention_released_at timestamptz,
  CONSTRAINT consumer_group_position CHECK ((stream_generation IS NULL) = (checkpoint_lsn IS NULL)),
  CONSTRAINT consumer_group_lease CHECK ((lease_owner IS NULL) = (lease_token IS NULL)
                                         AND (lease_token IS NULL) = (lease_expires_at IS NULL))
);

-- How long a removed group keeps protecting its unacknowledged changes from compaction,
-- in seconds (7 days unless the owner changes it; tests lower it). Refused when written
-- unless a whole number, so the functions never read a bad one.
INSERT INTO synchro.setting (name, value) VALUES ('consumer_group_resume_window_seconds', '604800');
ALTER TABLE synchro.setting ADD CONSTRAINT setting_consumer_group_resume_window CHECK (
  name <> 'consumer_group_resume_window_seconds' OR value ~ '^[0-9]{1,10}$');

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP VIEW IF EXISTS synchro.consumer_groups;
DROP FUNCTION IF EXISTS synchro.create_consumer_group(text, text, text[]);
DROP FUNCTION IF EXISTS synchro.acquire_lease(text, text, int);
DROP FUNCTION IF EXISTS synchro.read_changes(text, bigint, int, int);
DROP FUNCTION IF EXISTS synchro.ack(text, bigint, text);
DROP FUNCTION IF EXISTS synchro.release_lease(text, bigint);
DROP FUNCTION IF EXISTS synchro.remove_consumer_group(text, text);
DROP FUNCTION IF EXISTS synchro.release_consumer_retention(text, text);
DROP FUNCTION IF EXISTS synchro._consumer_leased(text, bigint, boolean);
DROP FUNCTION IF EXISTS synchro._consumer_floor(bigint);
DROP FUNCTION IF EXISTS synchro._consumer_compact(bigint, pg_lsn);
DROP FUNCTION IF EXISTS synchro._consumer_lock_key();
DROP FUNCTION IF EXISTS synchro._mat_changes(bigint, pg_lsn, timestamptz);
ALTER TABLE synchro.setting DROP CONSTRAINT setting_consumer_group_resume_window;
DELETE FROM synchro.setting WHERE name = 'consumer_group_resume_window_seconds';
DROP TABLE synchro.consumer_group_state, synchro.change_retention, synchro.change;

-- +goose Up
-- Synchro foundation: schema, roles, registry, row versions, write fences, push outcomes.
-- Tables are private: applications and operators reach them only through functions.

-- Roles are cluster-wide. A second database of the same cluster (or a concurrent
-- install into another database) finds them already there or being created: both
-- duplicate_object (42710) and unique_violation (23505, two creators racing on
-- pg_authid's unique index) mean "someone else made it".
-- +goose StatementBegin
DO $roles$
DECLARE
  r text;
BEGIN
  -- Roles are cluster-wide: a second database of the cluster finds them made. Only
  -- what is missing is made, so a database owner without CREATEROLE installs once the
  -- roles exist (PostgreSQL checks the privilege before it reports duplicate_object).
  FOREACH r IN ARRAY ARRAY['synchro_app', 'synchro_operator', 'synchro_runner'] LOOP
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN', r);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN
        NULL;
      END;
    END IF;
  END LOOP;
  -- An operator may do everything an application may.
  IF NOT pg_catalog.pg_has_role('synchro_operator', 'synchro_app', 'MEMBER') THEN
    BEGIN
      GRANT synchro_app TO synchro_operator;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL;
    END;
  END IF;
END
$roles$;
-- +goose StatementEnd

-- IF NOT EXISTS: goose keeps its version table, synchro.goose_version, in this schema
-- and creates it before this migration runs (synchro.GoosePrelude makes the schema).
CREATE SCHEMA IF NOT EXISTS synchro;

-- An installed pack whose goose history is elsewhere (a version table not moved into
-- schema synchro, or a different table name) must not be re-migrated from zero: stop
-- with the remedy instead of failing later on an existing table.
-- +goose StatementBegin
DO $installed$
BEGIN
  IF pg_catalog.to_regclass('synchro.setting') IS NOT NULL THEN
    RAISE EXCEPTION 'synchro: already installed, but this goose version table does not record it; run synchro.GoosePrelude (synchro migrations prelude) or use the install''s own table (docs/install.md)'
      USING ERRCODE = '55000';
  END IF;
END
$installed$;
-- +goose StatementEnd
REVOKE ALL ON SCHEMA synchro FROM PUBLIC;
GRANT USAGE ON SCHEMA synchro TO synchro_app, synchro_operator, synchro_runner;

-- Installation-wide settings (publication name, limits). Keyed text, read by functions.
CREATE TABLE synchro.setting (
  name  text PRIMARY KEY,
  value text NOT NULL
);
INSERT INTO synchro.setting (name, value) VALUES ('publication', 'synchro');

-- The server key that authenticates cursors and rebuild tokens. 32 bytes from
-- pg_strong_random (through gen_random_uuid), made once at install, never readable by
-- application roles.
CREATE TABLE synchro.server_key (
  singleton boolean PRIMARY KEY DEFAULT true CONSTRAINT server_key_singleton CHECK (singleton),
  key       bytea NOT NULL CONSTRAINT server_key_length CHECK (length(key) = 32)
);
INSERT INTO synchro.server_key (key)
SELECT sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8'));

-- Registry generations. At most one pending (being staged) and one active generation.
CREATE TABLE synchro.registry_generation (
  generation   bigint PRIMARY KEY,
  state        text NOT NULL CONSTRAINT registry_generation_state CHECK (state IN ('pending', 'active', 'retired')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  activated_at timestamptz
);
CREATE UNIQUE INDEX registry_generation_one_pending ON synchro.registry_generation (state) WHERE state = 'pending';
CREATE UNIQUE INDEX registry_generation_one_active ON synchro.registry_generation (state) WHERE state = 'active';

-- Immutable identity of every relation ever registered. relation_id and table_id are
-- never reused, even if a staged registration is never activated.
CREATE TABLE synchro.relation (
  relation_id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  relid              oid  NOT NULL CONSTRAINT relation_registered_once UNIQUE,
  schema_name        name NOT NULL,
  table_name         name NOT NULL,
  registration_kind  text NOT NULL CONSTRAINT relation_kind CHECK (registration_kind IN ('synced', 'capture_dependency')),
  table_id           text CONSTRAINT relation_table_id_never_reused UNIQUE,
  key_column         name NOT NULL,
  key_type           text NOT NULL CONSTRAINT relation_portable_key_type CHECK (key_type IN ('string', 'int', 'int64')),
  key_pg_type        text NOT NULL CONSTRAINT relation_key_pg_type CHECK (key_pg_type IN ('text', 'varchar', 'uuid', 'int4', 'int8')),
  staged_generation  bigint NOT NULL,
  CONSTRAINT relation_table_id_iff_synced CHECK ((registration_kind = 'synced') = (table_id IS NOT NULL)),
  CONSTRAINT relation_table_id_format CHECK (table_id ~ '^[a-z][a-z0-9_]{0,62}$')
);

-- The content of each generation: a complete copy, so a generation is self-contained
-- and the runner can select "the generation active at this event" without replaying
-- deltas.
CREATE TABLE synchro.registration (
  generation  bigint NOT NULL REFERENCES synchro.registry_generation,
  relation_id bigint NOT NULL REFERENCES synchro.relation,
  columns     name[] NOT NULL,
  PRIMARY KEY (generation, relation_id)
);

CREATE TABLE synchro.scope_rule (
  generation      bigint NOT NULL REFERENCES synchro.registry_generation,
  relation_id     bigint NOT NULL REFERENCES synchro.relation,
  rule_no         int    NOT NULL,
  scope_prefix    text   NOT NULL,
  column_name     name   NOT NULL,
  via_relation_id bigint REFERENCES synchro.relation,
  via_match       name,
  via_scope       name,
  PRIMARY KEY (generation, relation_id, rule_no),
  CONSTRAINT scope_rule_via_complete CHECK (
    (via_relation_id IS NULL AND via_match IS NULL AND via_scope IS NULL)
    OR (via_relation_id IS NOT NULL AND via_match IS NOT NULL AND via_scope IS NOT NULL))
);

-- Membership-rule generation per scope prefix: bumped by activation when the rules of
-- that prefix change, so cursors and rebuild tokens bound to the old rules go stale.
CREATE TABLE synchro.scope_prefix (
  scope_prefix    text PRIMARY KEY,
  rule_generation bigint NOT NULL,
  rules_digest    text NOT NULL
);

-- The canonical identity reservation of every registered row: its current opaque
-- version, and the tuple the last fence covered (for the out-of-order check). Push CAS
-- locks this row; every fence updates it.
CREATE TABLE synchro.row_version (
  relation_id bigint NOT NULL,
  pk          text   NOT NULL,
  version     text   NOT NULL,
  deleted     boolean NOT NULL DEFAULT false,
  -- The source transaction (top-level, 64-bit) and tuple (xmin, cmin) of the last
  -- fence. Only compared within that same transaction.
  fence_txid  xid8,
  fence_xmin  xid,
  fence_cmin  cid,
  PRIMARY KEY (relation_id, pk)
) WITH (fillfactor = 80); -- room for HOT updates: every fence rewrites the row

-- The registered-DML ordinal. A session-cached sequence is strictly increasing within a
-- session, hence within a source transaction, and no application role can set it.
CREATE SEQUENCE synchro.fence_ordinal AS bigint CACHE 1000;

-- Immutable write fence of each accepted push write, pending until WAL materialization
-- (coverage 'wal') or activated reset/initial baseline coverage ('baseline').
CREATE TABLE synchro.write_fence (
  fence_id    uuid PRIMARY KEY,
  client_id   text   NOT NULL,
  mutation_id uuid   NOT NULL,
  relation_id bigint NOT NULL REFERENCES synchro.relation,
  pk          text   NOT NULL,
  op          text   NOT NULL CONSTRAINT write_fence_op CHECK (op IN ('insert', 'update', 'delete')),
  version     text   NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  coverage    text CONSTRAINT write_fence_coverage CHECK (coverage IN ('wal', 'baseline')),
  covered_at  timestamptz
);
CREATE INDEX write_fence_pending_by_client ON synchro.write_fence (client_id) WHERE coverage IS NULL;

-- The mutation a push is applying right now in this transaction. Written only by
-- SECURITY DEFINER push helpers, read by the fence trigger: a session cannot forge a
-- push identity with a setting.
CREATE TABLE synchro.push_context (
  txid        xid8   PRIMARY KEY,
  client_id   text   NOT NULL,
  mutation_id uuid   NOT NULL,
  relation_id bigint NOT NULL,
  pk          text   NOT NULL
);

-- Decided push mutations: outcome recorded byte for byte, kept as long as the client.
CREATE TABLE synchro.mutation_outcome (
  client_id    text  NOT NULL,
  mutation_id  uuid  NOT NULL,
  content_hash bytea NOT NULL,
  outcome      jsonb NOT NULL,
  decided_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (client_id, mutation_id)
);

-- No role but the owner has direct DML (or reads) on synchro tables.
REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP SCHEMA synchro CASCADE;

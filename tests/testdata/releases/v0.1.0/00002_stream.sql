-- +goose Up
-- The WAL change stream: stream generations, durable progress, replay ledgers,
-- projections, membership, pull effects, quarantine and runner heartbeat.

-- Registered column types at activation, so capture can tell a retyped column (drift)
-- from an unchanged one without reading the live catalog.
ALTER TABLE synchro.registration ADD COLUMN column_types oid[];

-- One stream generation per slot lineage. Only an operator-authorized reset creates a
-- new one; the active one is the durable active-slot pointer.
CREATE TABLE synchro.stream_generation (
  stream_generation    bigint PRIMARY KEY,
  token                uuid   NOT NULL DEFAULT gen_random_uuid() UNIQUE, -- the opaque lineage id cursors bind to
  slot_name            text   NOT NULL,
  plugin               text   NOT NULL,
  database_name        name   NOT NULL,
  generation_start_lsn pg_lsn NOT NULL,
  state                text   NOT NULL CONSTRAINT stream_generation_state CHECK (state IN ('active', 'retired')),
  created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX stream_generation_one_active ON synchro.stream_generation (state) WHERE state = 'active';

-- Durable progress of the active generation (one row). Invariants (checked):
-- generation_start <= acknowledged <= processed, materialized <= processed.
CREATE TABLE synchro.progress (
  singleton            boolean PRIMARY KEY DEFAULT true CONSTRAINT progress_singleton CHECK (singleton),
  stream_generation    bigint  NOT NULL REFERENCES synchro.stream_generation,
  generation_start_lsn pg_lsn  NOT NULL,
  -- High-watermark: transaction_end(materialized_commit_lsn); NULL = generation_start.
  materialized_commit_lsn pg_lsn,
  -- Processed boundary: every source transaction whose commit record starts before it
  -- is completely durable. The slot may be acknowledged up to here, never further.
  processed_end_lsn    pg_lsn  NOT NULL,
  -- What the slot was last acknowledged to (NULL = generation_start).
  acknowledged_end_lsn pg_lsn,
  -- The registry generation in effect after the last materialized transaction.
  registry_generation  bigint,
  updated_at           timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT progress_ack_after_start CHECK (acknowledged_end_lsn IS NULL OR acknowledged_end_lsn >= generation_start_lsn),
  CONSTRAINT progress_ack_before_processed CHECK (coalesce(acknowledged_end_lsn, generation_start_lsn) <= processed_end_lsn),
  CONSTRAINT progress_materialized_before_processed CHECK (materialized_commit_lsn IS NULL OR materialized_commit_lsn <= processed_end_lsn),
  CONSTRAINT progress_processed_after_start CHECK (processed_end_lsn >= generation_start_lsn)
);

-- Replay identity of every materialized source transaction, applicable events or not.
CREATE TABLE synchro.txn (
  stream_generation bigint NOT NULL,
  commit_lsn        pg_lsn NOT NULL,
  end_lsn           pg_lsn NOT NULL,
  xid               bigint NOT NULL,
  commit_time       timestamptz NOT NULL,
  event_count       int    NOT NULL,
  materialized_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_generation, commit_lsn)
);

-- Replay identity of every applicable row event, with the fence it reconciled.
CREATE TABLE synchro.event (
  stream_generation   bigint NOT NULL,
  commit_lsn          pg_lsn NOT NULL,
  event_ordinal       int    NOT NULL,
  relation_id         bigint NOT NULL,
  op                  text   NOT NULL CONSTRAINT event_op CHECK (op IN ('insert', 'update', 'delete')),
  pk                  text   NOT NULL,
  version             text   NOT NULL,
  fence_id            uuid   NOT NULL CONSTRAINT event_fence_never_reused UNIQUE,
  registry_generation bigint NOT NULL,
  PRIMARY KEY (stream_generation, commit_lsn, event_ordinal)
);

-- Commit-ordered projected state of every registered row (synced and dependency):
-- the registered columns as to_jsonb renders them, and the row's version.
CREATE TABLE synchro.projection (
  relation_id bigint NOT NULL,
  pk          text   NOT NULL,
  pk_int      bigint, -- the typed key of int/int64 relations, for numeric ordering
  version     text   NOT NULL,
  image       jsonb  NOT NULL,
  PRIMARY KEY (relation_id, pk)
);
CREATE INDEX projection_int_order ON synchro.projection (relation_id, pk_int) WHERE pk_int IS NOT NULL;

-- Values of the columns scope rules look at (synced column_name, dependency via_match),
-- indexed so membership evaluation finds the rows a dependency change impacts.
CREATE TABLE synchro.rule_value (
  relation_id bigint NOT NULL,
  column_name name   NOT NULL,
  value       text   NOT NULL,
  pk          text   NOT NULL,
  PRIMARY KEY (relation_id, column_name, value, pk)
);
CREATE INDEX rule_value_by_row ON synchro.rule_value (relation_id, pk);

-- Current membership: which scopes each synced row belongs to.
CREATE TABLE synchro.membership (
  scope       text   NOT NULL,
  relation_id bigint NOT NULL,
  pk          text   NOT NULL,
  table_id    text   NOT NULL,
  pk_order    bigint NOT NULL, -- the int key for int/int64 tables, 0 for string keys
  PRIMARY KEY (scope, relation_id, pk)
);
CREATE INDEX membership_by_row ON synchro.membership (relation_id, pk);
-- Rebuild pages walk a scope in (table_id bytewise, typed key) order by keyset.
CREATE INDEX membership_rebuild_order ON synchro.membership (scope, table_id COLLATE "C", pk_order, pk COLLATE "C");

-- Retention horizon per stream generation: effects of transactions at or below
-- horizon_commit_lsn were compacted away; cursors below transaction_end(horizon) are stale.
CREATE TABLE synchro.retention (
  stream_generation  bigint PRIMARY KEY REFERENCES synchro.stream_generation,
  horizon_commit_lsn pg_lsn NOT NULL,
  updated_at         timestamptz NOT NULL DEFAULT now()
);

-- Pull effects, in delivery position order per scope. The primary key serves pull's
-- range scans: O(page) whatever the length of the stream.
CREATE TABLE synchro.effect (
  stream_generation bigint NOT NULL,
  scope             text   NOT NULL,
  commit_lsn        pg_lsn NOT NULL,
  event_ordinal     int    NOT NULL,
  effect_ordinal    int    NOT NULL,
  table_id          text   NOT NULL,
  relation_id       bigint NOT NULL,
  pk                text   NOT NULL,
  op                text   NOT NULL CONSTRAINT effect_op CHECK (op IN ('upsert', 'delete')),
  version           text,
  image             jsonb,
  created_at        timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_generation, scope, commit_lsn, event_ordinal, effect_ordinal),
  CONSTRAINT effect_upsert_has_image CHECK ((op = 'upsert') = (image IS NOT NULL))
);

-- Blocking quarantine records. Redacted by construction: positions, a bounded failure
-- class, a relation id, counters and times; no payloads, values or error text.
CREATE TABLE synchro.quarantine (
  stream_generation bigint NOT NULL,
  commit_lsn        pg_lsn NOT NULL,
  failure_class     text   NOT NULL CONSTRAINT quarantine_failure_class_bounded CHECK (failure_class ~ '^[a-z0-9_]{1,48}$'),
  relation_id       bigint,
  attempts          int    NOT NULL DEFAULT 1,
  first_seen        timestamptz NOT NULL DEFAULT now(),
  last_seen         timestamptz NOT NULL DEFAULT now(),
  retry_requested   boolean NOT NULL DEFAULT false,
  resolved_at       timestamptz,
  PRIMARY KEY (stream_generation, commit_lsn)
);

-- Runner heartbeat and recorded settings (one row): readiness needs only this database.
CREATE TABLE synchro.runner (
  singleton           boolean PRIMARY KEY DEFAULT true CONSTRAINT runner_singleton CHECK (singleton),
  owner               text   NOT NULL,
  pid                 int    NOT NULL,
  backend_pid         int    NOT NULL,
  slot_name           text   NOT NULL,
  publication         text   NOT NULL,
  database_name       name   NOT NULL,
  started_at          timestamptz NOT NULL,
  heartbeat_at        timestamptz NOT NULL,
  heartbeat_interval  interval NOT NULL,
  registry_generation bigint,
  materialized_commit_lsn pg_lsn,
  received_lsn        pg_lsn,
  state               text NOT NULL
);

-- HMAC-SHA-256 of cursors and rebuild tokens, built on the core sha256(): the key's
-- inner and outer pads (RFC 2104, 64-byte block) are derived once here.
ALTER TABLE synchro.server_key ADD COLUMN inner_pad bytea, ADD COLUMN outer_pad bytea;
UPDATE synchro.server_key sk
   SET inner_pad = (SELECT decode(string_agg(lpad(to_hex(get_byte(k.padded, i) # 54), 2, '0'), '' ORDER BY i), 'hex')
                      FROM (SELECT sk.key || decode(repeat('00', 32), 'hex') AS padded) k, generate_series(0, 63) i),
       outer_pad = (SELECT decode(string_agg(lpad(to_hex(get_byte(k.padded, i) # 92), 2, '0'), '' ORDER BY i), 'hex')
                      FROM (SELECT sk.key || decode(repeat('00', 32), 'hex') AS padded) k, generate_series(0, 63) i);
ALTER TABLE synchro.server_key ALTER COLUMN inner_pad SET NOT NULL, ALTER COLUMN outer_pad SET NOT NULL;

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP TABLE synchro.retention, synchro.runner, synchro.quarantine, synchro.effect, synchro.membership, synchro.rule_value,
  synchro.projection, synchro.event, synchro.txn, synchro.progress, synchro.stream_generation;
ALTER TABLE synchro.registration DROP COLUMN column_types;
ALTER TABLE synchro.server_key DROP COLUMN inner_pad, DROP COLUMN outer_pad;

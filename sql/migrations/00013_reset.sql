-- +goose Up
-- Operator-authorized stream reset (ADR 001, "Causally Bound Projection Baseline And
-- Stream Reset"): its durable lifecycle, its immutable reset_baseline coverage records,
-- and the two private schemas its staged state lives in.

-- The staged projections of the reset in progress (projection, rule_value, membership,
-- progress): made by synchro._reset_stage_tables as copies of the live tables' shape,
-- filled under the candidate slot's exported snapshot and by catch-up, installed by
-- synchro.activate_reset. synchro_retired holds the live tables set aside: for the
-- length of one catch-up batch (synchro._reset_swap), and after activation until the
-- runner's controlled cleanup. Only the owner reaches either.
CREATE SCHEMA synchro_reset;
CREATE SCHEMA synchro_retired;
REVOKE ALL ON SCHEMA synchro_reset, synchro_retired FROM PUBLIC;

-- One row per requested reset. Phases (CONTRACT.md, Operator): requested -> staging ->
-- catching_up -> ready -> activated, or aborted / failed. An open reset (every phase
-- but activated and aborted) blocks the old stream: materialize_batch refuses its
-- generation (synchro._reset_guard).
CREATE TABLE synchro.reset (
  reset_id           uuid   PRIMARY KEY DEFAULT gen_random_uuid(),
  reason             text   NOT NULL CONSTRAINT reset_reason_bounded CHECK (length(reason) BETWEEN 1 AND 200),
  phase              text   NOT NULL CONSTRAINT reset_phase CHECK (phase IN
                       ('requested', 'staging', 'catching_up', 'ready', 'activated', 'aborted', 'failed')),
  source_generation  bigint NOT NULL REFERENCES synchro.stream_generation, -- the stream it replaces
  target_generation  bigint NOT NULL UNIQUE, -- the stream generation activation creates; never reused
  retired_slot       text   NOT NULL, -- the old stream's slot, dropped by cleanup after activation
  attempt            int    NOT NULL DEFAULT 0, -- candidates made so far (a death in staging discards one)
  candidate_slot     text,  -- permanent logical slot of the current attempt
  database_name      name   NOT NULL DEFAULT current_database(),
  plugin             text,
  consistent_point   pg_lsn, -- the candidate slot's consistent point
  snapshot_boundary  pg_snapshot, -- the exported snapshot the baseline was staged under
  barrier_xid        xid8,        -- the coordinator's marker transaction
  barrier_snapshot   pg_snapshot, -- taken in the marker transaction with push fences locked out
  activation_barrier pg_lsn,      -- end of the marker transaction: generation_start of the new stream
  -- Digests of the staged state, taken when it was verified (phase ready) and checked
  -- again by activation: rows (relation, key, version) and scopes (membership).
  row_digest         text,
  scope_digest       text,
  -- Resumable work in short transactions (the staged tables stand under the live names
  -- only for one chunk at a time): indexing the staged baseline (index_step 'rules',
  -- then 'scopes'; keyset position index_rel, index_pk) and verifying the staged
  -- membership (position verify_rel, verify_pk; partial digest verify_count, verify_sum).
  index_step         text CONSTRAINT reset_index_step CHECK (index_step IN ('rules', 'scopes')),
  index_rel          bigint,
  index_pk           text,
  verify_rel         bigint,
  verify_pk          text,
  verify_count       bigint,
  verify_sum         numeric,
  verified           boolean NOT NULL DEFAULT false,
  detail             text CONSTRAINT reset_detail_bounded CHECK (detail ~ '^[a-z0-9_ =./]{0,120}$'),
  requested_at       timestamptz NOT NULL DEFAULT now(),
  staged_at          timestamptz,
  ready_at           timestamptz,
  ended_at           timestamptz, -- activated, aborted or failed
  cleaned_at         timestamptz  -- retired (or discarded) slot and tables dropped
);
CREATE UNIQUE INDEX reset_one_open ON synchro.reset ((true))
  WHERE phase IN ('requested', 'staging', 'catching_up', 'ready', 'failed');

-- Immutable reset_baseline coverage: every accepted push fence visible in the exported
-- snapshot. It counts as coverage (write_fence.coverage = 'baseline') only once its
-- reset activates; staged or failed resets do not clear capture_pending.
CREATE TABLE synchro.reset_baseline (
  reset_id          uuid   NOT NULL REFERENCES synchro.reset,
  -- No foreign key to write_fence: the record outlives any retention of fences.
  fence_id          uuid   NOT NULL,
  candidate_slot    text   NOT NULL,
  snapshot_boundary pg_snapshot NOT NULL,
  target_generation bigint NOT NULL,
  PRIMARY KEY (reset_id, fence_id)
);

REVOKE ALL ON synchro.reset, synchro.reset_baseline FROM PUBLIC;

-- +goose Down
DROP TABLE synchro.reset_baseline, synchro.reset;
DROP SCHEMA synchro_retired CASCADE;
DROP SCHEMA synchro_reset CASCADE;

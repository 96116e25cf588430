-- +goose Up
-- Projection bootstrap under an exported snapshot (issue 8 item 5; docs/bootstrap.md;
-- ADR 001, "Causally Bound Projection Baseline And Stream Reset", last paragraph).
-- activate_registry no longer copies rows under the fence-trigger lock: it records a
-- bootstrap request; the runner stages the rows under the exported snapshot of a
-- temporary slot (consistent point C), and the main worker is the catch-up: it skips
-- the bootstrapped relation's events of transactions that committed before C (they are
-- in the snapshot) and merges the stage at the first transaction end at or after C.
--
-- Lifecycle of a 'project' bootstrap: requested (activate_registry) -> staging (the
-- runner took it; attempt counts the snapshots taken) -> staged (rows, count, digest,
-- consistent point, coverage records committed) -> merged (the main worker), or
-- subsumed (a stream reset activated before the merge: its baseline holds the rows).
-- failed: the last staging attempt failed (detail); the runner tries again, the stream
-- waits (fail closed). A 'remove' is staged at once and merged at the activation.
ALTER TABLE synchro.bootstrap
  ADD COLUMN phase text NOT NULL DEFAULT 'requested'
    CONSTRAINT bootstrap_phase CHECK (phase IN ('requested', 'staging', 'staged', 'merged', 'failed', 'subsumed')),
  -- The stream generation the activation committed in: only its main worker merges it
  -- (a reset's catch-up materializes another generation and its baseline holds the rows).
  ADD COLUMN stream_generation bigint,
  ADD COLUMN attempt int NOT NULL DEFAULT 0,
  -- The exported snapshot's consistent point C: a source transaction whose commit LSN
  -- is below C is in the snapshot. NULL for a stage taken at the activation (a
  -- 'remove', or a stage left by migration 00016's in-transaction copy), merged at the
  -- activation's position.
  ADD COLUMN consistent_point pg_lsn,
  ADD COLUMN snapshot_boundary pg_snapshot,
  -- The temporary slot that exported the snapshot (gone with its connection): audit.
  ADD COLUMN slot_name text,
  -- Digest of the staged rows (key and version), checked again by the merge.
  ADD COLUMN row_digest text,
  ADD COLUMN requested_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN detail text CONSTRAINT bootstrap_detail_bounded CHECK (detail ~ '^[a-z0-9_ =./]{0,120}$');
ALTER TABLE synchro.bootstrap ALTER COLUMN staged_at DROP NOT NULL, ALTER COLUMN staged_at DROP DEFAULT;
-- Rows of migration 00016: merged ones are done; an unmerged one holds a complete stage
-- taken at its activation (consistent_point NULL: merged there, as before).
UPDATE synchro.bootstrap SET phase = CASE WHEN merged_at IS NOT NULL THEN 'merged' ELSE 'staged' END,
                             requested_at = staged_at;
UPDATE synchro.bootstrap b SET stream_generation = p.stream_generation FROM synchro.progress p;

-- Immutable baseline coverage of a bootstrap: every accepted push fence of the
-- bootstrapped relation visible in the exported snapshot. The main worker skips those
-- fences' events (they are in the snapshot); the merge marks the fences covered
-- (write_fence.coverage = 'baseline'), so capture_pending holds their clients until
-- the merged projection represents the write, and no longer.
CREATE TABLE synchro.bootstrap_coverage (
  generation        bigint NOT NULL,
  relation_id       bigint NOT NULL,
  -- No foreign key to write_fence: the record outlives any retention of fences.
  fence_id          uuid   NOT NULL,
  attempt           int    NOT NULL,
  snapshot_boundary pg_snapshot NOT NULL,
  PRIMARY KEY (generation, relation_id, fence_id),
  FOREIGN KEY (generation, relation_id) REFERENCES synchro.bootstrap
);

REVOKE ALL ON synchro.bootstrap_coverage FROM PUBLIC;

-- +goose Down
DROP TABLE synchro.bootstrap_coverage;
UPDATE synchro.bootstrap SET staged_at = coalesce(staged_at, requested_at);
ALTER TABLE synchro.bootstrap ALTER COLUMN staged_at SET NOT NULL, ALTER COLUMN staged_at SET DEFAULT now();
ALTER TABLE synchro.bootstrap
  DROP COLUMN phase, DROP COLUMN stream_generation, DROP COLUMN attempt, DROP COLUMN consistent_point,
  DROP COLUMN snapshot_boundary, DROP COLUMN slot_name, DROP COLUMN row_digest, DROP COLUMN requested_at,
  DROP COLUMN detail;

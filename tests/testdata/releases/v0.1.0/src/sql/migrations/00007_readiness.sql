-- +goose Up
-- Readiness (CONTRACT.md "Readiness"; ADR 001 "Readiness"; docs/sql/readiness.md).

-- The limits readiness decides with: one row, set by the operator (as the pack's owner:
-- UPDATE synchro.readiness_limit SET ...). No CHECK on purpose: readiness itself treats a
-- missing, NULL, non-positive or infinite limit as not ready, whoever wrote it.
CREATE TABLE synchro.readiness_limit (
  singleton     boolean PRIMARY KEY DEFAULT true CONSTRAINT readiness_limit_singleton CHECK (singleton),
  -- Largest heartbeat age of the runner (now - synchro.runner.heartbeat_at).
  heartbeat     interval,
  -- Largest WAL lag in bytes: current WAL insert position - processed boundary.
  wal_lag_bytes bigint,
  -- Largest commit lag (docs/sql/readiness.md defines it).
  commit_lag    interval
);
INSERT INTO synchro.readiness_limit (heartbeat, wal_lag_bytes, commit_lag)
VALUES (interval '30 seconds', 1073741824, interval '60 seconds');

-- WAL marks for the commit lag: (WAL insert position, time) pairs the runner's heartbeat
-- records. mark is the newest; prev_mark is the newest one the processed boundary had
-- passed when mark was taken. A source commit at or after a mark's position was written
-- after the mark's time.
ALTER TABLE synchro.runner
  ADD COLUMN wal_mark_lsn      pg_lsn,
  ADD COLUMN wal_mark_at       timestamptz,
  ADD COLUMN wal_prev_mark_lsn pg_lsn,
  ADD COLUMN wal_prev_mark_at  timestamptz;

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP FUNCTION IF EXISTS synchro.ready();
DROP FUNCTION IF EXISTS synchro.readiness();
ALTER TABLE synchro.runner
  DROP COLUMN wal_mark_lsn, DROP COLUMN wal_mark_at, DROP COLUMN wal_prev_mark_lsn, DROP COLUMN wal_prev_mark_at;
DROP TABLE synchro.readiness_limit;

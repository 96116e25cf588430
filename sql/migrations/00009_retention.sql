-- +goose Up
-- Bounded storage (issue 12 item 4; docs/retention.md): every table of schema synchro
-- has a retention rule. Function bodies (synchro.compact, synchro.compact_all,
-- synchro.retire_client, synchro._retention_floor) live in sql/functions.

-- Retired client ids: synchro.retire_client deletes a client's push outcomes and write
-- fences and records the id here, so push refuses it from then on (SY409: the old
-- device continues as a new client). Kept for the setting retired_client_retention,
-- then compaction forgets the id.
CREATE TABLE synchro.retired_client (
  client_id  text PRIMARY KEY,
  retired_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX retired_client_by_age ON synchro.retired_client (retired_at);

-- Compaction removes outcomes older than outcome_retention oldest first, and a
-- retired client's fences by client: both need an index to stay bounded per batch.
-- write_fence before mutation_outcome: the order a push takes them in (its fence writes
-- the write fence, then the outcome is recorded). The other order deadlocked with a push
-- running during the upgrade (TestUpgradeWithData).
CREATE INDEX write_fence_by_client ON synchro.write_fence (client_id);
CREATE INDEX mutation_outcome_by_age ON synchro.mutation_outcome (decided_at);

-- The operator's retention settings (as the pack's owner: UPDATE synchro.setting SET
-- value = ... WHERE name = ...). Intervals in PostgreSQL's syntax, rows per compaction
-- batch as a whole number. A value that does not parse, is negative or out of range is
-- refused when written; compaction also treats anything unreadable as "keep", never
-- as "delete".
INSERT INTO synchro.setting (name, value) VALUES
  ('outcome_retention', '30 days'),
  ('retired_client_retention', '365 days'),
  ('compact_batch_rows', '10000');
-- CASE, not OR: the cast must never be evaluated for another setting's value.
ALTER TABLE synchro.setting ADD CONSTRAINT setting_retention_interval CHECK (
  CASE WHEN name IN ('outcome_retention', 'retired_client_retention')
       THEN CASE WHEN length(value) BETWEEN 1 AND 64 THEN value::interval >= interval '0' ELSE false END
       ELSE true END);
ALTER TABLE synchro.setting ADD CONSTRAINT setting_compact_batch_rows CHECK (
  name <> 'compact_batch_rows'
  OR CASE WHEN value ~ '^[0-9]{1,7}$' THEN value::int BETWEEN 1 AND 1000000 ELSE false END);

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP FUNCTION IF EXISTS synchro.retire_client(text);
DROP PROCEDURE IF EXISTS synchro.compact_all(interval, jsonb);
DROP FUNCTION IF EXISTS synchro._retention_floor(bigint, timestamptz);
DROP FUNCTION IF EXISTS synchro._setting_interval(text);
ALTER TABLE synchro.setting DROP CONSTRAINT setting_compact_batch_rows;
ALTER TABLE synchro.setting DROP CONSTRAINT setting_retention_interval;
DELETE FROM synchro.setting WHERE name IN ('outcome_retention', 'retired_client_retention', 'compact_batch_rows');
DROP INDEX synchro.write_fence_by_client;
DROP INDEX synchro.mutation_outcome_by_age;
DROP TABLE synchro.retired_client;

-- +goose Up
-- Push outcomes are kept as long as their client exists (CONTRACT.md, push: "whatever
-- the retention of the change stream"): compaction deletes them only when the operator
-- sets an age limit. The default was 30 days, which let a device that retried an old
-- push after that have it applied again. outcome_retention now reads 'never' by
-- default (compaction keeps every outcome until retire_client); an install still at
-- the old default gets it, and one whose operator chose another limit keeps that.
ALTER TABLE synchro.setting DROP CONSTRAINT setting_retention_interval;
-- CASE, not OR: the cast must never be evaluated for another setting's value.
ALTER TABLE synchro.setting ADD CONSTRAINT setting_retention_interval CHECK (
  CASE WHEN name = 'outcome_retention' AND value = 'never' THEN true
       WHEN name IN ('outcome_retention', 'retired_client_retention')
       THEN CASE WHEN length(value) BETWEEN 1 AND 64 THEN value::interval >= interval '0' ELSE false END
       ELSE true END);
UPDATE synchro.setting SET value = 'never' WHERE name = 'outcome_retention' AND value = '30 days';
-- The function files of this release ride on this migration (goose.go, finalMigration):
-- among them, an unchanged out-of-line value taken from the prior projection goes into
-- the image already rendered (synchro._materialize_txn), and registration refuses
-- generated columns and types whose text does not read back (synchro._check_columns,
-- synchro._render_unreadable).

-- +goose Down
UPDATE synchro.setting SET value = '30 days' WHERE name = 'outcome_retention' AND value = 'never';
ALTER TABLE synchro.setting DROP CONSTRAINT setting_retention_interval;
ALTER TABLE synchro.setting ADD CONSTRAINT setting_retention_interval CHECK (
  CASE WHEN name IN ('outcome_retention', 'retired_client_retention')
       THEN CASE WHEN length(value) BETWEEN 1 AND 64 THEN value::interval >= interval '0' ELSE false END
       ELSE true END);

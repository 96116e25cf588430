-- +goose Up
-- rule_value is probed by (relation_id, column_name, value_hash) through its primary key
-- (the lookups compute synchro._scope_hash of the value). The hash index on value alone
-- (migration 00004) was unselective: a value such as a project id repeats across the
-- synced rows that carry it, so a probe for a dependency row's value visited every
-- synced row with that value (10,000 rows fanned out in minutes instead of a second).
DROP INDEX IF EXISTS synchro.rule_value_by_value;

-- +goose Down
CREATE INDEX rule_value_by_value ON synchro.rule_value USING hash (value);

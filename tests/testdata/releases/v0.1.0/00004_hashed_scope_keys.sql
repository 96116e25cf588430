-- +goose Up
-- Scope and rule values of any length (issue 13, item 4c).
--
-- A btree entry holds at most about 2.7 kB, so a scope or rule value longer than that
-- (an application's long text, a document id made of several parts) failed
-- materialization with 54000 and stopped the stream for good. The index keys now
-- hold the SHA-256 of the value instead, in a stored generated column; the full value
-- stays in its column and every lookup still compares it, so equality is exact. SHA-256
-- has no known collisions, so uniqueness by hash is uniqueness by value.
--
-- The expression is sha256 of the value's bytes: decode(replace(v, '\', '\\'),
-- 'escape') is exactly the text's bytes (escape format reads only doubled
-- backslashes specially) and, unlike convert_to, immutable, as a generated column
-- requires. synchro._scope_hash computes the same for queries.
--
-- membership and effect keep their range scans: pull walks (stream_generation,
-- scope_hash, commit_lsn, event_ordinal, effect_ordinal), rebuild walks (scope_hash,
-- table_id, pk_order, pk), each with the full scope compared as well. rule_value is
-- probed by (relation_id, column_name, value) for membership: a hash index on value
-- serves that probe whatever the length.

ALTER TABLE synchro.membership
  ADD COLUMN scope_hash bytea GENERATED ALWAYS AS (sha256(decode(replace(scope, '\', '\\'), 'escape'))) STORED;
ALTER TABLE synchro.membership DROP CONSTRAINT membership_pkey;
ALTER TABLE synchro.membership ADD CONSTRAINT membership_pkey PRIMARY KEY (scope_hash, relation_id, pk);
DROP INDEX synchro.membership_rebuild_order;
CREATE INDEX membership_rebuild_order ON synchro.membership (scope_hash, table_id COLLATE "C", pk_order, pk COLLATE "C");

ALTER TABLE synchro.effect
  ADD COLUMN scope_hash bytea GENERATED ALWAYS AS (sha256(decode(replace(scope, '\', '\\'), 'escape'))) STORED;
ALTER TABLE synchro.effect DROP CONSTRAINT effect_pkey;
ALTER TABLE synchro.effect ADD CONSTRAINT effect_pkey
  PRIMARY KEY (stream_generation, scope_hash, commit_lsn, event_ordinal, effect_ordinal);

ALTER TABLE synchro.rule_value
  ADD COLUMN value_hash bytea GENERATED ALWAYS AS (sha256(decode(replace(value, '\', '\\'), 'escape'))) STORED;
ALTER TABLE synchro.rule_value DROP CONSTRAINT rule_value_pkey;
ALTER TABLE synchro.rule_value ADD CONSTRAINT rule_value_pkey PRIMARY KEY (relation_id, column_name, value_hash, pk);
CREATE INDEX rule_value_by_value ON synchro.rule_value USING hash (value);

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
DROP INDEX synchro.rule_value_by_value;
ALTER TABLE synchro.rule_value DROP CONSTRAINT rule_value_pkey;
ALTER TABLE synchro.rule_value ADD CONSTRAINT rule_value_pkey PRIMARY KEY (relation_id, column_name, value, pk);
ALTER TABLE synchro.rule_value DROP COLUMN value_hash;

ALTER TABLE synchro.effect DROP CONSTRAINT effect_pkey;
ALTER TABLE synchro.effect ADD CONSTRAINT effect_pkey
  PRIMARY KEY (stream_generation, scope, commit_lsn, event_ordinal, effect_ordinal);
ALTER TABLE synchro.effect DROP COLUMN scope_hash;

DROP INDEX synchro.membership_rebuild_order;
ALTER TABLE synchro.membership DROP CONSTRAINT membership_pkey;
ALTER TABLE synchro.membership ADD CONSTRAINT membership_pkey PRIMARY KEY (scope, relation_id, pk);
ALTER TABLE synchro.membership DROP COLUMN scope_hash;
CREATE INDEX membership_rebuild_order ON synchro.membership (scope, table_id COLLATE "C", pk_order, pk COLLATE "C");

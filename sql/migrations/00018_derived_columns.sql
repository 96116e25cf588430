-- +goose Up
-- The derived columns of the tables materialization writes most (issue 7, per-row cost)
-- are written by their writers instead of generated per row: scope_hash (SHA-256 of the
-- scope: effect and membership) and image_bytes (the image rendered to text and
-- measured: effect and projection). Generated, each row paid both again in every table:
-- about 2.5 us per effect, 1.4 per membership and 1 per projection, a twentieth of a
-- row event's materialization. Materialization now hashes each scope of a row once for
-- both tables and measures each image once (synchro._materialize_run); the other writers
-- compute them with the same expressions (synchro._scope_hash, octet_length(image::text)).
--
-- DROP EXPRESSION keeps every stored value and the NOT NULL of scope_hash; no rewrite.
-- The tests compare every stored value with its expression after randomized workloads
-- (TestDerivedColumnsMatch). The upgrade procedure stops the runner before the pack is
-- upgraded (docs/install.md), so no earlier release's function writes these tables
-- without the columns in between.
ALTER TABLE synchro.projection ALTER COLUMN image_bytes DROP EXPRESSION;
ALTER TABLE synchro.projection ALTER COLUMN image_bytes SET NOT NULL;
ALTER TABLE synchro.effect ALTER COLUMN scope_hash DROP EXPRESSION, ALTER COLUMN image_bytes DROP EXPRESSION,
  ADD CONSTRAINT effect_image_bytes CHECK ((image IS NULL) = (image_bytes IS NULL));
ALTER TABLE synchro.membership ALTER COLUMN scope_hash DROP EXPRESSION;

-- +goose Down
-- Generated again (PostgreSQL 15 cannot add an expression to a column: dropped and added,
-- with the indexes on them). The function files of the release being restored (re-applied
-- by its installer) no longer write the columns.
ALTER TABLE synchro.membership DROP CONSTRAINT membership_pkey;
DROP INDEX synchro.membership_rebuild_order;
ALTER TABLE synchro.membership DROP COLUMN scope_hash;
ALTER TABLE synchro.membership
  ADD COLUMN scope_hash bytea GENERATED ALWAYS AS (sha256(decode(replace(scope, '\', '\\'), 'escape'))) STORED NOT NULL;
ALTER TABLE synchro.membership ADD CONSTRAINT membership_pkey PRIMARY KEY (relation_id, pk, scope_hash);
CREATE INDEX membership_rebuild_order ON synchro.membership (scope_hash, table_id COLLATE "C", pk_order, pk COLLATE "C");

ALTER TABLE synchro.effect DROP CONSTRAINT effect_image_bytes;
ALTER TABLE synchro.effect DROP CONSTRAINT effect_pkey;
ALTER TABLE synchro.effect DROP COLUMN scope_hash, DROP COLUMN image_bytes;
ALTER TABLE synchro.effect
  ADD COLUMN scope_hash bytea GENERATED ALWAYS AS (sha256(decode(replace(scope, '\', '\\'), 'escape'))) STORED NOT NULL,
  ADD COLUMN image_bytes int GENERATED ALWAYS AS (pg_catalog.octet_length(image::pg_catalog.text)) STORED;
ALTER TABLE synchro.effect
  ADD CONSTRAINT effect_pkey PRIMARY KEY (stream_generation, scope_hash, commit_lsn, event_ordinal, effect_ordinal);

ALTER TABLE synchro.projection DROP COLUMN image_bytes;
ALTER TABLE synchro.projection
  ADD COLUMN image_bytes int GENERATED ALWAYS AS (pg_catalog.octet_length(image::pg_catalog.text)) STORED;

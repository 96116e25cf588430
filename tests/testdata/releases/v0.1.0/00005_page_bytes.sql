-- +goose Up
-- Pull and rebuild pages stop at a byte budget of row images as well as at their row
-- bound (CONTRACT.md "Pull"; docs/sql/pull.md, rebuild.md). An image's size is the
-- octet_length of its JSON text, the bytes a client receives for it, measured once when
-- the image is stored: a stored generated column, so materialization and the baseline
-- are unchanged and a page never renders an image it does not deliver just to measure
-- it (a page reads up to its row bound plus one, whatever their size). Adding a stored
-- generated column rewrites both tables once, under ACCESS EXCLUSIVE: on an install with
-- a long stream, compact first.
ALTER TABLE synchro.effect
  ADD COLUMN image_bytes int GENERATED ALWAYS AS (pg_catalog.octet_length(image::pg_catalog.text)) STORED;
ALTER TABLE synchro.projection
  ADD COLUMN image_bytes int GENERATED ALWAYS AS (pg_catalog.octet_length(image::pg_catalog.text)) STORED;

-- The budget, in bytes of row images per page: 8 MiB unless the owner changes it (tests
-- lower it). synchro.setting is owner-only. A value that is not a whole number from 1 to
-- 64 MiB is refused when written (64 MiB keeps a page's jsonb far below PostgreSQL's
-- 256 MB limit), so pull and rebuild never read a bad one.
INSERT INTO synchro.setting (name, value) VALUES ('page_byte_budget', '8388608');
ALTER TABLE synchro.setting ADD CONSTRAINT setting_page_byte_budget CHECK (
  name <> 'page_byte_budget'
  OR CASE WHEN value ~ '^[0-9]{1,9}$' THEN value::int BETWEEN 1 AND 67108864 ELSE false END);

-- +goose Down
ALTER TABLE synchro.setting DROP CONSTRAINT setting_page_byte_budget;
DELETE FROM synchro.setting WHERE name = 'page_byte_budget';
ALTER TABLE synchro.projection DROP COLUMN image_bytes;
ALTER TABLE synchro.effect DROP COLUMN image_bytes;

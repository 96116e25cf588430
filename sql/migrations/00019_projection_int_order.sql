-- +goose Up
-- projection_int_order (relation_id, pk_int) serves no query (pull and rebuild order
-- by membership's pk_order), yet every projection insertion paid an index entry for
-- it: a WAL record that the runner's own walsender reads too, one of about 16 per
-- materialized row event (issue 7, docs/benchmarks.md).
DROP INDEX IF EXISTS synchro.projection_int_order;
-- A stream reset staged before this migration copied the index with its live name
-- (synchro._reset_stage_tables), and its activation would bring it back.
DROP INDEX IF EXISTS synchro_reset.projection_int_order;

-- +goose Down
CREATE INDEX IF NOT EXISTS projection_int_order ON synchro.projection (relation_id, pk_int) WHERE pk_int IS NOT NULL;

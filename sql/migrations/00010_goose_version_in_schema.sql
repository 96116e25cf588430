-- +goose Up
-- The pack's goose history lives in synchro.goose_version (issue 12 item 7), never in
-- the application's schema. Installs from before the move had synchro_goose_version in
-- the installer's schema: `synchro migrate up` and `synchro sql` move it themselves
-- (synchro.GoosePrelude); a team running its own goose runs `synchro migrations
-- prelude` once and then goose with -table synchro.goose_version (docs/install.md).
-- A goose run that still records this pack elsewhere stops here with the remedy, so the
-- history never splits between two tables.
-- +goose StatementBegin
DO $goose_table$
BEGIN
  IF pg_catalog.to_regclass('synchro.goose_version') IS NULL THEN
    RAISE EXCEPTION 'synchro: goose must record this pack in synchro.goose_version: run `synchro migrations prelude` (it moves the old table), then goose with -table synchro.goose_version (docs/install.md)'
      USING ERRCODE = '55000';
  END IF;
  -- Inside the block: goose, not a migration, creates the table (sqlc reads the
  -- migrations as the schema and would not know it).
  COMMENT ON TABLE synchro.goose_version IS
    'goose''s version table of the Synchro pack (docs/install.md): written by synchro migrate up, synchro sql and goose -table synchro.goose_version';
END
$goose_table$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $goose_table$
BEGIN
  COMMENT ON TABLE synchro.goose_version IS NULL;
END
$goose_table$;
-- +goose StatementEnd

-- +goose Up
-- synchro.runner_pack_version() (sql/functions/runner_pack_version.sql): the runner
-- reads the newest migration installed and waits, instead of quarantining, when a
-- deploy migrated the pack past its own release while it ran (TestRunnerOlderThanThePack).
-- The function files of this release ride on this migration (goose.go,
-- finalMigration), which ends with synchro._refresh_fences(): every registered
-- relation's fence is regenerated.

-- +goose Down

-- +goose Up
-- synchro.runner_columns takes the registry generation the runner stages from
-- (from_generation), so it no longer gives the columns of generations the stream has
-- left behind: a column only they registered is not checked by the fence any more,
-- and a value jsonb refuses there quarantined a good transaction
-- (TestRunnerRetiredColumnNeverStaged). The one-argument function goes first: with
-- both, a call with one argument would be ambiguous. A runner of the earlier release
-- still calls it with one argument, which the new one takes (from_generation
-- defaults to the stream's generation). The function files of this release ride on
-- this migration (goose.go, finalMigration).
DROP FUNCTION IF EXISTS synchro.runner_columns(bigint);

-- +goose Down
SELECT 1;

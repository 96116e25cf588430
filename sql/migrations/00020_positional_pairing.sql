-- +goose Up
-- No table changes. The function files of this release ride on the newest migration
-- (goose.go, finalMigration), and this release changes some, so it needs one of its
-- own: an install that ran 00019 gets them here. The runner now stages a pair number
-- on each row event and fence (pg_temp.synchro_stage.pair_no, created per session by
-- synchro.runner_stage_open), and the set-based path pairs fences by it before it
-- ranks them (synchro._mat_run_pair_fences; issue 7). A runner of an earlier release
-- stages no numbers: the upgrade procedure stops it first (docs/install.md), and a
-- session that opened its work tables before the upgrade fails its set-based batches
-- (no column pair_no), which the runner then re-runs one transaction at a time. This
-- release's runner on a pack not migrated yet refuses the session before it stages
-- anything (runner.OpenStage: the staging table lacks pair_no) and retries.
SELECT 1;

-- +goose Down
SELECT 1;

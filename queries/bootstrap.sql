-- Queries of the runner's part of a projection bootstrap (runner/bootstrap_stage.go).
-- LSNs cross as text, as in runner.sql.

-- Take the requested (or interrupted, or failed) bootstraps: phase staging, one more attempt.
-- name: RunnerBootstrapBegin :many
SELECT b.generation::bigint AS generation, b.relation_id::bigint AS relation_id
FROM synchro.runner_bootstrap_begin() AS b(generation, relation_id);

-- Allocate row versions for one chunk of keys after `after`; the chunk's last key (done when the table is).
-- name: RunnerBootstrapVersions :one
SELECT (v.last IS NULL)::boolean AS done, coalesce(v.last, '')::text AS last
FROM synchro.runner_bootstrap_versions(sqlc.arg(relation_id)::bigint, sqlc.narg(after)::text,
                                       sqlc.arg(chunk)::int) AS v(last);

-- Stage the bootstraps inside the transaction that imported the slot's exported snapshot.
-- name: RunnerBootstrapStage :one
SELECT synchro.runner_bootstrap_stage(sqlc.arg(consistent_point)::text::pg_lsn, sqlc.arg(slot_name)::text)::bigint AS staged;

-- A staging attempt failed (bounded detail).
-- name: RunnerBootstrapFail :exec
SELECT synchro.runner_bootstrap_fail(sqlc.arg(detail)::text);

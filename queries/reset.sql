-- Queries of the runner's part of a stream reset (runner/reset.go). LSNs cross as text,
-- as in runner.sql; '' / 0 stand for NULL.

-- The open reset, else an ended one whose cleanup is due; no row when nothing is to do.
-- name: RunnerResetState :one
SELECT s.reset_id::text                                AS reset_id,
       s.phase::text                                   AS phase,
       s.target_generation::bigint                     AS target_generation,
       coalesce(s.candidate_slot, '')::text            AS candidate_slot,
       s.retired_slot::text                            AS retired_slot,
       coalesce(s.consistent_point::text, '')::text    AS consistent_point,
       coalesce(s.barrier_xid::text, '')::text          AS barrier_xid,
       coalesce(s.activation_barrier::text, '')::text  AS activation_barrier
FROM synchro.runner_reset_state() AS s(reset_id, phase, target_generation, candidate_slot, retired_slot,
                                       consistent_point, barrier_xid, activation_barrier);

-- Start a new candidate (discarding an earlier one's stage); returns the candidate slot name.
-- name: RunnerResetCandidate :one
SELECT synchro.runner_reset_candidate(sqlc.arg(reset_id)::text::uuid, sqlc.arg(plugin)::text)::text AS candidate_slot;

-- Stage the baseline inside the transaction that imported the candidate's exported snapshot.
-- name: RunnerResetBaseline :exec
SELECT synchro.runner_reset_baseline(sqlc.arg(reset_id)::text::uuid, sqlc.arg(slot_name)::text,
                                     sqlc.arg(consistent_point)::text::pg_lsn);

-- Write the coordinator's marker transaction (its own transaction).
-- name: RunnerResetMark :exec
SELECT synchro.runner_reset_mark(sqlc.arg(reset_id)::text::uuid);

-- Materialize a staged batch of the candidate slot into the reset's staged state.
-- name: RunnerResetMaterialize :one
SELECT synchro.runner_reset_materialize(sqlc.arg(reset_id)::text::uuid, sqlc.arg(commit_lsns)::text[]::pg_lsn[],
                                        sqlc.arg(end_lsns)::text[]::pg_lsn[], sqlc.arg(xids)::bigint[],
                                        sqlc.arg(commit_times)::timestamptz[], sqlc.arg(set_based)::boolean)::text[] AS outcomes;

-- Phase ready, once the candidate slot is acknowledged to the barrier.
-- name: RunnerResetReady :exec
SELECT synchro.runner_reset_ready(sqlc.arg(reset_id)::text::uuid);

-- Phase failed, with a bounded failure class.
-- name: RunnerResetFail :exec
SELECT synchro.runner_reset_fail(sqlc.arg(reset_id)::text::uuid, sqlc.arg(failure_class)::text);

-- Controlled cleanup done (the slot that ended with the reset is dropped).
-- name: RunnerResetCleaned :exec
SELECT synchro.runner_reset_cleaned(sqlc.arg(reset_id)::text::uuid);

-- Index one chunk of the staged baseline rows (rule values, then membership); true when done.
-- name: RunnerResetIndex :one
SELECT synchro.runner_reset_index(sqlc.arg(reset_id)::text::uuid, sqlc.arg(chunk)::int)::boolean AS done;

-- Verify one chunk of the staged membership against a fresh evaluation; true when verified.
-- name: RunnerResetVerify :one
SELECT synchro.runner_reset_verify(sqlc.arg(reset_id)::text::uuid, sqlc.arg(chunk)::int)::boolean AS done;

-- Row versions for registered rows without one, chunk by chunk, before the candidate slot.
-- name: RunnerResetVersions :one
SELECT (v.relation_id IS NULL)::boolean AS done, coalesce(v.relation_id, 0)::bigint AS relation_id,
       coalesce(v.last, '')::text AS last
FROM synchro.runner_reset_versions(sqlc.arg(reset_id)::text::uuid, sqlc.narg(after_relation)::bigint,
                                   sqlc.narg(after)::text, sqlc.arg(chunk)::int) AS v;

-- Queries of the consumer-group package (consumer/consumer.go) and the runner's
-- per-group lag gauges (runner/observe.go). Results of read_changes are its jsonb as
-- text, decoded by the package.

-- consumer.Run: take or renew the group's lease; the fencing token.
-- name: AcquireLease :one
SELECT synchro.acquire_lease(sqlc.arg(name)::text, sqlc.arg(owner)::text, sqlc.arg(lease_seconds)::int)::bigint AS token;

-- consumer.Run: the group's next batch after its checkpoint.
-- name: ReadChanges :one
SELECT synchro.read_changes(sqlc.arg(name)::text, sqlc.arg(token)::bigint, sqlc.arg(max_transactions)::int,
                            sqlc.arg(max_bytes)::int)::text AS result;

-- consumer.Run: acknowledge a handled batch (its last position).
-- name: AckPosition :exec
SELECT synchro.ack(sqlc.arg(name)::text, sqlc.arg(token)::bigint, sqlc.arg(position)::text);

-- consumer.Run: give the lease back on a clean stop.
-- name: ReleaseLease :exec
SELECT synchro.release_lease(sqlc.arg(name)::text, sqlc.arg(token)::bigint);

-- runner metrics: each group's lag (removed groups are left out).
-- name: ConsumerGroupLag :many
SELECT g.name::text AS name, g.lag_transactions::bigint AS lag_transactions, g.lag_seconds::float8 AS lag_seconds
  FROM synchro.consumer_groups g
 WHERE g.removed_at IS NULL
 ORDER BY g.name;

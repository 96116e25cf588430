-- Queries of the reference client (client/client.go): the server calls behind Push and Sync.
-- Results are the functions' jsonb as text, decoded by the client.

-- Client.Push (client/push.go): apply a batch of mutations in one server transaction.
-- name: Push :one
SELECT synchro.push(sqlc.arg(client_id)::text, sqlc.arg(mutations)::text::jsonb)::text AS result;

-- Client.Sync (client/sync.go): one page of changes of a scope after a cursor.
-- name: Pull :one
SELECT synchro.pull(sqlc.arg(client_id)::text, sqlc.arg(scope)::text, sqlc.arg(cursor)::text,
                    sqlc.arg(max_changes)::int)::text AS result;

-- Client.Sync (client/sync.go): one page of a scope's rebuild (session NULL on the first page).
-- name: Rebuild :one
SELECT synchro.rebuild(sqlc.arg(client_id)::text, sqlc.arg(scope)::text, sqlc.narg(session)::text,
                       sqlc.arg(max_rows)::int)::text AS result;

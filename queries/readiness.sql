-- Readiness (runner/readiness.go: /readyz and `synchro ready`).

-- The readiness table, in the contract's order.
-- name: Readiness :many
SELECT r.check_name::text AS check_name, coalesce(r.ok, false)::boolean AS ok, coalesce(r.detail, '')::text AS detail
FROM synchro.readiness() AS r(check_name, ok, detail);

-- synchro.ready() and the names of the failing checks, in one statement.
-- name: Ready :one
SELECT coalesce(synchro.ready(), false)::boolean AS ready,
       coalesce((SELECT array_agg(r.check_name ORDER BY r.n)
                   FROM synchro.readiness() WITH ORDINALITY AS r(check_name, ok, detail, n)
                  WHERE NOT coalesce(r.ok, false)), '{}')::text[] AS failing;

-- Readiness (runner/readiness.go: /readyz and `synchro ready`).

-- The readiness table, in the contract's order.
-- name: Readiness :many
SELECT r.check_name::text AS check_name, coalesce(r.ok, false)::boolean AS ok, coalesce(r.detail, '')::text AS detail
FROM synchro.readiness() AS r(check_name, ok, detail);

-- synchro.ready() and the names of the failing checks, in one statement. The table is
-- read only when not ready: a ready probe runs synchro.ready() alone, which never reads
-- the consumer groups' change record (synchro.readiness() lists their lag).
-- name: Ready :one
WITH r AS (SELECT coalesce(synchro.ready(), false) AS ready)
SELECT r.ready::boolean AS ready,
       CASE WHEN r.ready THEN '{}'::text[]
            ELSE coalesce((SELECT array_agg(x.check_name ORDER BY x.n)
                             FROM synchro.readiness() WITH ORDINALITY AS x(check_name, ok, detail, n)
                            WHERE NOT coalesce(x.ok, false)), '{}')::text[] END AS failing
  FROM r;

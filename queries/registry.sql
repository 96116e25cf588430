-- Registry generations, oldest first, for `synchro migrate status`.
-- name: RegistryGenerations :many
SELECT generation, state, activated_at
FROM synchro.registry_generation
ORDER BY generation;

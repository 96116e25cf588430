-- +goose Up
-- The privilege boundary (issue 13, docs/security.md).

-- Advisory-lock keys (runner claim, registry, push's per-mutation locks) are hashed with
-- a per-install secret, so no other role can take them by guessing a fixed key. Derived
-- once from the server key; readable only by the owner (synchro.setting is private).
INSERT INTO synchro.setting (name, value)
SELECT 'lock_seed',
       (('x' || encode(substr(sha256(k.key || convert_to('synchro.advisory_lock', 'UTF8')), 1, 8), 'hex'))::bit(64)::bigint)::text
  FROM synchro.server_key k
ON CONFLICT (name) DO NOTHING;

-- The top-level transaction that wrote each write fence: push records an accepted
-- outcome only for a fence of its own transaction. A DEFAULT, so the fence template
-- needs no change; rows fenced before this migration keep NULL (never "this
-- transaction"). Added without a default first, so existing rows are not rewritten.
ALTER TABLE synchro.write_fence ADD COLUMN txid xid8;
ALTER TABLE synchro.write_fence ALTER COLUMN txid SET DEFAULT pg_current_xact_id();
-- The accepted-outcome check finds the fence by mutation id (pending fences only: a
-- fence of the current transaction cannot be covered yet).
CREATE INDEX write_fence_pending_by_mutation ON synchro.write_fence (mutation_id) WHERE coverage IS NULL;

-- Signature changes of the push helpers (IF EXISTS: on a fresh install the function
-- files come after the migrations). _push_record returns the recorded outcome (push
-- calls every helper as an assignment, synchro._called_from_push); _push_enter takes
-- whether to lock the reservation; _reject_reason is inlined into push (synchro_app must
-- not execute it, and nothing else used it).
DROP FUNCTION IF EXISTS synchro._push_record(text, uuid, text, jsonb);
DROP FUNCTION IF EXISTS synchro._push_enter(text, uuid, bigint, text);
DROP FUNCTION IF EXISTS synchro._reject_reason(text, text, text);

REVOKE ALL ON ALL TABLES IN SCHEMA synchro FROM PUBLIC;

-- +goose Down
-- Function files are re-applied by every install; _push_record comes back from its file.
DROP INDEX synchro.write_fence_pending_by_mutation;
ALTER TABLE synchro.write_fence DROP COLUMN txid;
DELETE FROM synchro.setting WHERE name = 'lock_seed';

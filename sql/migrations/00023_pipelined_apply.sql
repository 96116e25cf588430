-- +goose Up
-- The runner materializes a batch in two calls on two apply sessions, so that the next
-- batch's relation checks, fence pairing and row images (synchro.materialize_prepare)
-- overlap the writes of the batch before (synchro.materialize_write). Both are new
-- functions; synchro.materialize_batch stays, for a runner of the earlier release and
-- for every batch the set-based path does not take. An empty text key is now a key in
-- the fence wire format (runner side only). The function files of this release ride on
-- this migration (goose.go, finalMigration).
--
-- A ledger row's materialized_at is the start of the call that materialized it
-- (statement_timestamp), not of its database transaction (now()): a pipelined batch's
-- write may run in a transaction begun before the batch after it began staging, and
-- the ledger's materialized_at must still rise with commit_lsn (synchro._retention_floor
-- relies on it). Each write call starts once the batch before committed.
ALTER TABLE synchro.txn ALTER COLUMN materialized_at SET DEFAULT statement_timestamp();
-- Dropped before the function files re-create them: a database migrated while these
-- functions were under development may hold an earlier materialize_write (returning
-- text[]), which CREATE OR REPLACE cannot change into one with OUT parameters.
DROP FUNCTION IF EXISTS synchro.materialize_write(bigint, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]);

-- +goose Down
ALTER TABLE synchro.txn ALTER COLUMN materialized_at SET DEFAULT now();
DROP FUNCTION IF EXISTS synchro.materialize_write(bigint, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]);
DROP FUNCTION IF EXISTS synchro.materialize_prepare(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]);

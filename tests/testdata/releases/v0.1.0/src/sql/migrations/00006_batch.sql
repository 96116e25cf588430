-- +goose Up
-- Batched materialization: the runner calls synchro.materialize_batch (a batch of
-- consecutive source transactions per database transaction); the per-transaction
-- path lives on as synchro._materialize_txn. Function bodies are in sql/functions.
DROP FUNCTION IF EXISTS synchro.materialize(bigint, pg_lsn, pg_lsn, bigint, timestamptz);

-- +goose Down
DROP FUNCTION IF EXISTS synchro.materialize_batch(bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[], boolean);
DROP FUNCTION IF EXISTS synchro._materialize_run(int, int, bigint, pg_lsn[], pg_lsn[], bigint[], timestamptz[]);
DROP FUNCTION IF EXISTS synchro._materialize_txn(int, bigint, pg_lsn, pg_lsn, bigint, timestamptz);

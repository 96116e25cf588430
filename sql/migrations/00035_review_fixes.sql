-- +goose Up
-- Push (found by review 2026-12-05, twenty-fourth session):
--
-- synchro._push_prepare locks the active registry generation's row (FOR SHARE) in a
-- REPEATABLE READ or SERIALIZABLE transaction: such a push read the registry of its
-- snapshot, and after an activation that removed a column committed it wrote that
-- column and returned it. It fails with 40001 now, and its retry sees the new registry
-- (TestPushRepeatableReadAfterActivation).
--
-- synchro._activation_lock_tables locks the active registry generation's row first,
-- under its 100 ms bound: a REPEATABLE READ push holds it FOR SHARE, and an activation
-- that waited for it at its final update held every registered table's lock meanwhile
-- (TestActivationWaitsForRepeatableReadPushWithoutBlockingWriters).
--
-- synchro._push_run inserts with a plain INSERT in a block of its own, no longer ON
-- CONFLICT DO NOTHING RETURNING: a conflicting insert kept what the application's BEFORE
-- INSERT triggers wrote for the proposed row (pull-visible when they wrote a registered
-- table), and a row the caller may insert but not read back was rejected 42501 for ever
-- (TestPushConflictUndoesTriggerWrites, TestPushInsertRaceConflictUndoesTriggerWrites,
-- TestPushInsertIntoWriteOnlyRows): the key's own unique index (key columns only, on the
-- target table) is the conflict, and at REPEATABLE READ the same insert with ON CONFLICT
-- DO NOTHING, rolled back, tells a row outside the snapshot (40001) from one a policy
-- hides (TestPushInsertRaceCoveringPrimaryKey, TestPushForeignConstraintSameName,
-- TestPushRepeatableReadRaceUnderPermissiveRLS). And a whole-call failure keeps its
-- message only when the pack raised it: an application trigger raising 55000, 40001 or an
-- SY code passed the row's values to the caller (TestPushPassThroughErrorCarriesNoValue,
-- TestPushTriggerSYMessageCarriesNoValue).
--
-- Poison retries (found by review 2026-12-05, twenty-fourth session): a retry request
-- made while an attempt ran was cleared when that attempt failed, and the stream stayed
-- blocked after the repair (TestRetryRequestDuringFailingAttempt). Requests are counted
-- (quarantine.retry_seq, by synchro.retry_poison); synchro.runner_state returns the
-- count and synchro.runner_poison takes the one its attempt ran under (attempt_seq),
-- keeping a later request asked for. runner_state's result gains a column and
-- runner_poison an argument (a runner of an earlier release passes none: its request
-- is cleared, as before), so both are dropped here and created again by their files.
ALTER TABLE synchro.quarantine ADD COLUMN retry_seq bigint NOT NULL DEFAULT 0;
DROP FUNCTION IF EXISTS synchro.runner_state();
DROP FUNCTION IF EXISTS synchro.runner_poison(bigint, pg_lsn, text, bigint);

-- The function files of this release ride on this migration (goose.go,
-- finalMigration), which ends with synchro._refresh_fences(): every registered
-- relation's fence is regenerated.

-- +goose Down

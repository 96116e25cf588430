-- The newest migration of the pack installed here (synchro.goose_version): the runner
-- compares it with the newest one its own release ships (synchro.PackVersion) at the
-- start of every step and before it quarantines a source transaction. A runner runs
-- only against the pack of its own release (docs/install.md): one left running while
-- a deploy migrated the pack past it calls functions that changed or are gone, and
-- its failures (42883, 42804, anything else) are the release mismatch, not the source
-- transaction's; filed as poison they blocked the stream until an operator retried,
-- and the retry failed again. It waits instead, until the matching runner replaces it
-- (TestRunnerOlderThanThePack).
--
-- Every later release keeps this function as it is: runners of this release and later
-- call it against every newer pack. NULL when goose records no migration.
CREATE OR REPLACE FUNCTION synchro.runner_pack_version()
RETURNS bigint
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
  SELECT pg_catalog.max(v.version_id) FROM synchro.goose_version v WHERE v.is_applied
$$;

REVOKE ALL ON FUNCTION synchro.runner_pack_version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.runner_pack_version() TO synchro_runner;

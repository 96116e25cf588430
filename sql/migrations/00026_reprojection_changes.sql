-- +goose Up
-- Consumer groups: a relation already streaming that an activation re-projects
-- (set_columns, rebind_relation) had its changes committed between the activation and
-- the stage's consistent point C folded into the stage, and no group ever got them
-- (deletions included). The merge now writes the difference between the relation's
-- projection and the stage as the change records of one transaction at C - 1
-- (synchro._bootstrap_catch_up; docs/bootstrap.md).
--
-- Independent reviews (2026-12-04): the fence refuses a write to a renamed or moved
-- registered table (0A000; its full check read the table by name as the owner, and an
-- application view of that name ran the application's function as the owner), and the
-- baselines refuse such a table (synchro._live_shape_check). No function literal holds
-- a backslash outside E'' (a caller's standard_conforming_strings = off changed the
-- fence's MAC bytes and blocked the stream, and broke pull and rebuild). COPY FREEZE is
-- recognized whatever the statement holds between COPY and FREEZE. Push reads a row
-- again when its row lock found the tuple deleted (a key deleted and inserted again
-- concurrently answered as absent). activate_registry compares a prefix's rules as
-- values (a digest of separator-joined fields collided). A via rule whose columns'
-- text is not their equality is refused (synchro._stage_scope_rule).
--
-- The fence measures values under the runner's rendering settings (its SET clauses:
-- DateStyle, IntervalStyle, extra_float_digits, bytea_output): a writer's
-- extra_float_digits = -15 let a row past the 128 MiB check that the walsender could
-- not render. It refuses xml that is not well-formed content (2200N). aclitem and
-- gtsvector columns are refused at registration (their text does not read back).
-- Push and materialization pin bytea_output and xmloption too.
--
-- Registered columns' attribute numbers (synchro.registration.column_attnums, set at
-- activation): a registered column dropped and added again under the same name and
-- type (every row's value gone, no row event in the WAL) is drift for readiness and
-- the baselines, and set_columns re-projects the relation. Existing registrations get
-- the attribute numbers their columns have now.
ALTER TABLE synchro.registration ADD COLUMN column_attnums int2[];
UPDATE synchro.registration reg
   SET column_attnums = ARRAY(
         SELECT a.attnum FROM unnest(reg.columns) WITH ORDINALITY c(name, n)
           JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
           JOIN pg_catalog.pg_attribute a ON a.attrelid = rel.relid AND a.attname = c.name
                                        AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY c.n)
 WHERE reg.column_types IS NOT NULL;
--
-- synchro.bootstrap.streamed: the relation's projection was established before the
-- activation that requested the bootstrap (it streamed), so the merge writes the
-- window's difference as change records; a relation new to the stream gets none, also
-- when a later activation supersedes its first bootstrap before it merged.
ALTER TABLE synchro.bootstrap ADD COLUMN streamed boolean NOT NULL DEFAULT false;
--
-- synchro.registry_clock: one row every staging call and activation writes right after
-- the registry lock (synchro._registry_lock), so that a REPEATABLE READ or SERIALIZABLE
-- operator transaction whose snapshot predates another operator's staging fails with
-- 40001 instead of activating a generation it did not see whole.
CREATE TABLE synchro.registry_clock (
  one     boolean PRIMARY KEY DEFAULT true CHECK (one),
  changes bigint  NOT NULL DEFAULT 0
);
INSERT INTO synchro.registry_clock DEFAULT VALUES;
REVOKE ALL ON synchro.registry_clock FROM PUBLIC;
--
-- Push (a second review): the row is rendered as to_jsonb(t.*) (a column named t was
-- taken for the row); only the columns a mutation names are built (a NOT NULL domain
-- column left out failed the write); a row visible but not lockable under row-level
-- security is rejected 42501 (it was reported absent); a varchar(n) key longer than n is
-- rejected 22001 (trailing spaces made the call fail whole with 55000); a mutation
-- naming a GENERATED ALWAYS column is SY400 (it failed whole with 428C9). Registration
-- refuses a key column with a nondeterministic collation.
--
-- The function files of this release ride on this migration (goose.go,
-- finalMigration), which ends with synchro._refresh_fences(): every registered
-- relation's fence is regenerated.

-- +goose Down
DROP TABLE synchro.registry_clock;
ALTER TABLE synchro.bootstrap DROP COLUMN streamed;
ALTER TABLE synchro.registration DROP COLUMN column_attnums;

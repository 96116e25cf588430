-- +goose Up
-- The fence's out-of-order check identifies the tuple a fence covered by its place (the
-- relation's file and the tuple's ctid) instead of (xmin, cmin), in the function files
-- (synchro._fence_source): an aborted savepoint that touched the tuple turned its cmin
-- into a combo command id, and the check let a late fence through or refused a legal
-- transaction (TestXidAuditFenceOrder*). And a delete's fence records no tuple: it read
-- the live one, which could be its own statement's later re-insert of the key (a
-- DELETE ... RETURNING feeding an INSERT), and the insert's fence then refused a legal
-- statement (TestFencePlaceCTEReplace*). The two columns keep their names and types:
-- renaming or adding a column takes an ACCESS EXCLUSIVE lock on the table every fence
-- writes, which waits for every open source transaction and holds every new one behind
-- it. A comment takes SHARE UPDATE EXCLUSIVE, which no writer conflicts with.
--
-- A transaction open across this upgrade compares places with the (xmin, cmin) its
-- earlier fences recorded. They match only by chance (a 27000 refusal of that one
-- transaction); a late fence is caught only when its nested fence ran after the upgrade
-- too, which for a statement that runs across the upgrade it may not.
--
-- The function files of this release ride on this migration (goose.go,
-- finalMigration), which ends with synchro._refresh_fences(): every registered
-- relation's fence is regenerated.
COMMENT ON COLUMN synchro.row_version.fence_xmin IS
  'file (pg_relation_filenode) of the tuple the last fence covered, as xid; compared only within fence_txid (synchro._fence_source)';
COMMENT ON COLUMN synchro.row_version.fence_cmin IS
  'ctid of the tuple the last fence covered, packed as block * 2048 + offset mod 2^32, as cid; compared only within fence_txid (synchro._fence_source)';

-- +goose Down
COMMENT ON COLUMN synchro.row_version.fence_xmin IS NULL;
COMMENT ON COLUMN synchro.row_version.fence_cmin IS NULL;

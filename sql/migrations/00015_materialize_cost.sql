-- +goose Up
-- rule_value now indexes only what a dependency change looks up (synchro._rule_value_columns:
-- via-rule columns of synced relations and via_match columns of dependencies). Rows of
-- direct-rule columns were never probed; materialization no longer writes them, and the
-- ones earlier releases wrote go here (they would only be stale weight).
DELETE FROM synchro.rule_value v
 WHERE NOT EXISTS (
   SELECT 1 FROM synchro.scope_rule r
    WHERE r.via_relation_id IS NOT NULL
      AND ((r.relation_id = v.relation_id AND r.column_name = v.column_name)
           OR (r.via_relation_id = v.relation_id AND r.via_match = v.column_name)));

-- The runner authenticates the pack's messages itself before staging them
-- (runner/msgauth, synchro.runner_message_key): materialization no longer does.
DROP FUNCTION IF EXISTS synchro._authenticate_messages();
-- Takes the staged row count now (truncation by volume, not by batch count).
DROP FUNCTION IF EXISTS synchro._stage_reset(boolean);

-- membership carried three indexes, two of them on the row: the primary key
-- (scope_hash, relation_id, pk) for uniqueness only, and membership_by_row
-- (relation_id, pk) for the probes by row. One primary key (relation_id, pk, scope_hash)
-- does both jobs, so each membership written costs one index entry less. (Rebuild pages
-- by scope through membership_rebuild_order, unchanged.)
ALTER TABLE synchro.membership DROP CONSTRAINT membership_pkey;
DROP INDEX synchro.membership_by_row;
ALTER TABLE synchro.membership ADD CONSTRAINT membership_pkey PRIMARY KEY (relation_id, pk, scope_hash);

-- +goose Down
-- The rule values of direct rules are not restored: an earlier release re-indexes every
-- rule column of the rows it materializes, and synchro._reevaluate_prefixes rebuilds the
-- whole index. Its function files (re-applied by its installer) bring back the dropped
-- functions.
ALTER TABLE synchro.membership DROP CONSTRAINT membership_pkey;
ALTER TABLE synchro.membership ADD CONSTRAINT membership_pkey PRIMARY KEY (scope_hash, relation_id, pk);
CREATE INDEX membership_by_row ON synchro.membership (relation_id, pk);

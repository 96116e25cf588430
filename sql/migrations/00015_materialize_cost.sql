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

-- +goose Down
-- Nothing to restore: an earlier release re-indexes every rule column of the rows it
-- materializes, and synchro._reevaluate_prefixes rebuilds the whole index.
SELECT 1;

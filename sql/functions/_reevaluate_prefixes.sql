-- After an activation that changed scope rules: rebuilds the rule-value index and the
-- membership of the changed prefixes for every projected row, under the new rules.
-- Membership of other prefixes is untouched. No pull effects: cursors and rebuild
-- tokens bound to a changed prefix are stale anyway (its rule generation changed).
CREATE OR REPLACE FUNCTION synchro._reevaluate_prefixes(reg_start bigint, reg_end bigint) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already (a SET clause would cost a GUC save/restore per call).
AS $$
DECLARE
  changed text[];
BEGIN
  SELECT array_agg(sp.scope_prefix) INTO changed FROM synchro.scope_prefix sp
   WHERE sp.rule_generation > coalesce(reg_start, 0) AND sp.rule_generation <= reg_end;
  -- The indexed columns may have changed too: rebuild the whole index.
  DELETE FROM synchro.rule_value;
  INSERT INTO synchro.rule_value (relation_id, column_name, value, pk)
  SELECT DISTINCT p.relation_id, c.col, p.image ->> c.col::text, p.pk
    FROM (SELECT c.relation_id, c.column_name AS col FROM synchro._rule_value_columns(reg_end) c) c
    JOIN synchro.projection p ON p.relation_id = c.relation_id
   WHERE p.image ->> c.col::text IS NOT NULL;
  PERFORM synchro._rebuild_prefix_membership(reg_end, changed);
END
$$;

REVOKE ALL ON FUNCTION synchro._reevaluate_prefixes(bigint, bigint) FROM PUBLIC;

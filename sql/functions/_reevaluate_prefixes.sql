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
  IF changed IS NULL THEN
    RETURN;
  END IF;

  DELETE FROM pg_temp.synchro_w_impacted;
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
   WHERE p.relation_id IN (SELECT r.relation_id FROM synchro.scope_rule r
                            WHERE r.generation = reg_end AND r.scope_prefix = ANY (changed));
  PERFORM synchro._evaluate_membership(reg_end);
  DELETE FROM synchro.membership m
   WHERE EXISTS (SELECT 1 FROM unnest(changed) c(prefix) WHERE starts_with(m.scope, c.prefix));
  INSERT INTO synchro.membership (scope, relation_id, pk, table_id, pk_order)
  SELECT s.scope, s.relation_id, s.pk, r.table_id, CASE WHEN r.key_type = 'string' THEN 0 ELSE s.pk::bigint END
    FROM pg_temp.synchro_w_scopes s JOIN synchro.relation r ON r.relation_id = s.relation_id
   WHERE EXISTS (SELECT 1 FROM unnest(changed) c(prefix) WHERE starts_with(s.scope, c.prefix))
  ON CONFLICT DO NOTHING;
  DELETE FROM pg_temp.synchro_w_impacted;
  DELETE FROM pg_temp.synchro_w_scopes;
END
$$;

REVOKE ALL ON FUNCTION synchro._reevaluate_prefixes(bigint, bigint) FROM PUBLIC;

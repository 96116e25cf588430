-- The membership of every scope whose prefix is in `changed`, evaluated afresh under
-- registry generation reg for every projected row of the relations those prefixes'
-- rules name: the old memberships of those prefixes go, the evaluated ones come.
-- Membership of other prefixes is untouched, and no pull effects are made: cursors and
-- rebuild tokens of a changed prefix are stale (its rule generation changed). Used
-- after a rule change (synchro._reevaluate_prefixes) and after a projection bootstrap's
-- merge (synchro._bootstrap_catch_up). Needs the rule-value index of reg in place.
CREATE OR REPLACE FUNCTION synchro._rebuild_prefix_membership(reg bigint, changed text[]) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already. plpgsql: the body names pg_temp work tables.
AS $$
BEGIN
  IF changed IS NULL THEN
    RETURN;
  END IF;
  DELETE FROM pg_temp.synchro_w_impacted;
  INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
  SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
   WHERE p.relation_id IN (SELECT r.relation_id FROM synchro.scope_rule r
                            WHERE r.generation = reg AND r.scope_prefix = ANY (changed));
  PERFORM synchro._evaluate_membership(reg);
  DELETE FROM synchro.membership m
   WHERE EXISTS (SELECT 1 FROM unnest(changed) c(prefix) WHERE starts_with(m.scope, c.prefix));
  INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
  SELECT s.scope, synchro._scope_hash(s.scope), s.relation_id, s.pk, r.table_id, CASE WHEN r.key_type = 'string' THEN 0 ELSE s.pk::bigint END
    FROM pg_temp.synchro_w_scopes s JOIN synchro.relation r ON r.relation_id = s.relation_id
   WHERE EXISTS (SELECT 1 FROM unnest(changed) c(prefix) WHERE starts_with(s.scope, c.prefix))
  ON CONFLICT DO NOTHING;
  DELETE FROM pg_temp.synchro_w_impacted;
  DELETE FROM pg_temp.synchro_w_scopes;
END
$$;

REVOKE ALL ON FUNCTION synchro._rebuild_prefix_membership(bigint, text[]) FROM PUBLIC;

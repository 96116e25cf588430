-- Indexes baseline rows already in synchro.projection, in keyset order (relation_id,
-- pk) after (after_rel, after_pk) (NULL: from the start), at most lim rows (NULL: all):
-- step 'rules' re-indexes their scope-rule values (synchro._refresh_rule_values), step
-- 'scopes' evaluates the membership of the synced ones (synchro._evaluate_membership)
-- and records it. Every rule value must be indexed before any membership is evaluated
-- (via rules read the dependency rows' values). The first start runs both steps whole,
-- in its baseline transaction; a reset runs them in chunks on its staged tables
-- (synchro.runner_reset_index). Returns how many rows it took and the last key.
CREATE OR REPLACE FUNCTION synchro._baseline_index(
  reg bigint, step text, after_rel bigint, after_pk text, lim bigint,
  OUT n bigint, OUT last_rel bigint, OUT last_pk text)
LANGUAGE plpgsql
-- No SET clause: called only from functions that pinned search_path.
AS $$
BEGIN
  DELETE FROM pg_temp.synchro_w_final;
  DELETE FROM pg_temp.synchro_w_impacted;
  IF step = 'rules' THEN
    INSERT INTO pg_temp.synchro_w_final (relation_id, pk)
    SELECT p.relation_id, p.pk FROM synchro.projection p
     WHERE after_rel IS NULL OR (p.relation_id, p.pk) > (after_rel, after_pk)
     ORDER BY p.relation_id, p.pk LIMIT lim;
    SELECT count(*) INTO n FROM pg_temp.synchro_w_final;
    IF lim IS NOT NULL THEN
      SELECT f.relation_id, f.pk INTO last_rel, last_pk FROM pg_temp.synchro_w_final f
       ORDER BY f.relation_id DESC, f.pk DESC LIMIT 1;
    END IF;
    PERFORM synchro._refresh_rule_values(reg);
  ELSIF step = 'scopes' THEN
    INSERT INTO pg_temp.synchro_w_impacted (relation_id, pk, event_ordinal, touched)
    SELECT p.relation_id, p.pk, 0, false FROM synchro.projection p
      JOIN synchro.relation r ON r.relation_id = p.relation_id AND r.registration_kind = 'synced'
     WHERE after_rel IS NULL OR (p.relation_id, p.pk) > (after_rel, after_pk)
     ORDER BY p.relation_id, p.pk LIMIT lim;
    SELECT count(*) INTO n FROM pg_temp.synchro_w_impacted;
    IF lim IS NOT NULL THEN
      SELECT i.relation_id, i.pk INTO last_rel, last_pk FROM pg_temp.synchro_w_impacted i
       ORDER BY i.relation_id DESC, i.pk DESC LIMIT 1;
    END IF;
    PERFORM synchro._evaluate_membership(reg);
    INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
    SELECT s.scope, synchro._scope_hash(s.scope), s.relation_id, s.pk, r.table_id, CASE WHEN r.key_type = 'string' THEN 0 ELSE s.pk::bigint END
      FROM pg_temp.synchro_w_scopes s JOIN synchro.relation r ON r.relation_id = s.relation_id
    ON CONFLICT DO NOTHING;
  ELSE
    RAISE EXCEPTION '_baseline_index: unknown step' USING ERRCODE = 'SY400';
  END IF;
END
$$;

REVOKE ALL ON FUNCTION synchro._baseline_index(bigint, text, bigint, text, bigint) FROM PUBLIC;

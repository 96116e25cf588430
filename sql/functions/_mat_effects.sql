-- A phase of synchro._materialize_txn (the per-transaction reference path), alone in
-- its own function: the net pull effects of transaction (gen, clsn) from the impacted
-- rows' old and new scopes, then the membership those leave.
CREATE OR REPLACE FUNCTION synchro._mat_effects(gen bigint, clsn pg_lsn) RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._materialize_txn, under the pinned
-- search_path and row-image settings of synchro.materialize_batch.
AS $$
BEGIN
  -- Net pull effects per scope: upsert when the row is in the scope and was touched
  -- (or just entered it); delete when it left the scope or was deleted. effect_ordinal
  -- counts within (event, scope) in canonical (table_id, typed key, operation) order.
  -- The impacted rows' current memberships, probed by row (the primary key's prefix).
  INSERT INTO pg_temp.synchro_w_oldscopes (relation_id, pk, scope)
  SELECT i.relation_id, i.pk, m.scope
    FROM pg_temp.synchro_w_impacted i
    CROSS JOIN LATERAL (SELECT m.scope FROM synchro.membership m
                         WHERE m.relation_id = i.relation_id AND m.pk = i.pk OFFSET 0) m;

  INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
                              table_id, relation_id, pk, op, version, image, image_bytes)
  SELECT gen, e.scope, synchro._scope_hash(e.scope), clsn, e.event_ordinal,
         (row_number() OVER (PARTITION BY e.scope, e.event_ordinal
                             ORDER BY r.table_id COLLATE "C",
                                      CASE WHEN r.key_type <> 'string' THEN e.pk::bigint END,
                                      e.pk COLLATE "C", e.op))::int - 1,
         r.table_id, e.relation_id, e.pk, e.op,
         CASE WHEN e.op = 'upsert' THEN pr.version END,
         CASE WHEN e.op = 'upsert' THEN pr.image END,
         CASE WHEN e.op = 'upsert' THEN pr.image_bytes END
    FROM (
      SELECT n.scope, n.relation_id, n.pk, i.event_ordinal, 'upsert' AS op
        FROM pg_temp.synchro_w_scopes n
        JOIN pg_temp.synchro_w_impacted i ON i.relation_id = n.relation_id AND i.pk = n.pk
       WHERE i.touched
          OR NOT EXISTS (SELECT 1 FROM pg_temp.synchro_w_oldscopes o
                          WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.scope = n.scope)
      UNION ALL
      SELECT o.scope, o.relation_id, o.pk, i.event_ordinal, 'delete'
        FROM pg_temp.synchro_w_oldscopes o
        JOIN pg_temp.synchro_w_impacted i ON i.relation_id = o.relation_id AND i.pk = o.pk
       WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_w_scopes n
                          WHERE n.relation_id = o.relation_id AND n.pk = o.pk AND n.scope = o.scope)
    ) e
    JOIN synchro.relation r ON r.relation_id = e.relation_id
    LEFT JOIN LATERAL (SELECT pj.version, pj.image, pj.image_bytes FROM synchro.projection pj
                        WHERE pj.relation_id = e.relation_id AND pj.pk = e.pk OFFSET 0) pr ON true;

  -- Memberships that ended, by primary key; then the new ones.
  DELETE FROM synchro.membership m
   WHERE m.ctid = ANY (ARRAY(
     SELECT x.ctid FROM pg_temp.synchro_w_oldscopes o
      CROSS JOIN LATERAL (SELECT m2.ctid FROM synchro.membership m2
                           WHERE m2.scope = o.scope AND m2.relation_id = o.relation_id AND m2.pk = o.pk OFFSET 0) x
      WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_w_scopes n
                         WHERE n.relation_id = o.relation_id AND n.pk = o.pk AND n.scope = o.scope)));
  INSERT INTO synchro.membership (scope, scope_hash, relation_id, pk, table_id, pk_order)
  SELECT n.scope, synchro._scope_hash(n.scope), n.relation_id, n.pk, r.table_id, CASE WHEN r.key_type = 'string' THEN 0 ELSE n.pk::bigint END
    FROM pg_temp.synchro_w_scopes n JOIN synchro.relation r ON r.relation_id = n.relation_id
   WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_w_oldscopes o
                      WHERE o.relation_id = n.relation_id AND o.pk = n.pk AND o.scope = n.scope);
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_effects(bigint, pg_lsn) FROM PUBLIC;

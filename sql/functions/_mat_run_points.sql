-- A phase of the set-based run (synchro._materialize_run), for a run that changes
-- dependency rows (capture_dependency relations: no table id): the membership
-- timeline of the run's synced rows, pg_temp.synchro_b_points. Called before the run
-- writes projections and rule values: the stored ones are the state before the run.
--
-- The reference path (synchro._materialize_txn) evaluates, after each transaction,
-- every synced row it touched and every synced row a dependency row it changed
-- reaches: a row whose via-rule column holds that dependency row's via_match value
-- before or after the transaction, as the row stands after it. An effect of a reached
-- row belongs to the last event of a reaching dependency row in that transaction (or
-- to its own, if later). Here, set-based, for every transaction t of the run at once:
--   * the values a dependency row had before t come from its previous link, or from
--     its stored rule values for its first; after t, from its link's image;
--   * a synced row as it stands at t is its last link at or before t, or, when it has
--     none, its stored rule values and projection;
--   * each synced link is a point (touched), with the greater of its own event and
--     the reaching ones; each row reached at a t where it has no link is a point too
--     (not touched), with the row's image as it stands at t.
-- Points are numbered along the run per row (point, last), as links are.
CREATE OR REPLACE FUNCTION synchro._mat_run_points(reg bigint)
RETURNS void
LANGUAGE plpgsql
-- No SET clause: called only from synchro._mat_run_write, under the pinned search_path,
-- row-image settings and join methods of the run. plpgsql: the body names pg_temp
-- work tables that do not exist at install time.
AS $$
BEGIN
  WITH links AS MATERIALIZED (
    SELECT l.t, pg_catalog.lead(l.t) OVER (PARTITION BY l.relation_id, l.pk ORDER BY l.t) AS next_t,
           l.relation_id, l.pk, l.op, l.image, l.link, l.fresh, l.event_ordinal
      FROM pg_temp.synchro_b_links l),
  rules AS MATERIALIZED (
    SELECT DISTINCT r.relation_id, r.column_name, r.via_relation_id, r.via_match
      FROM synchro.scope_rule r WHERE r.generation = reg AND r.via_relation_id IS NOT NULL),
  -- The via_match values of the dependency rows each transaction changed, before and
  -- after it, with the synced relation and column each reaches.
  dv AS MATERIALIZED (
    SELECT x.t, x.relation_id, x.column_name, x.value, max(x.event_ordinal) AS event_ordinal
      FROM (SELECT d.t, r.relation_id, r.column_name, d.image ->> r.via_match::text AS value, d.event_ordinal
              FROM links d JOIN rules r ON r.via_relation_id = d.relation_id
             WHERE d.op <> 'delete'
            UNION ALL
            SELECT d.t, r.relation_id, r.column_name, pd.image ->> r.via_match::text, d.event_ordinal
              FROM links d
              JOIN links pd ON pd.relation_id = d.relation_id AND pd.pk = d.pk AND pd.link = d.link - 1
              JOIN rules r ON r.via_relation_id = d.relation_id
             WHERE pd.op <> 'delete'
            UNION ALL
            SELECT d.t, r.relation_id, r.column_name, v.value, d.event_ordinal
              FROM links d
              JOIN rules r ON r.via_relation_id = d.relation_id
              CROSS JOIN LATERAL (SELECT v.value FROM synchro.rule_value v
                                   WHERE v.relation_id = d.relation_id AND v.pk = d.pk
                                     AND v.column_name = r.via_match OFFSET 0) v
             WHERE d.link = 1 AND NOT d.fresh) x
     WHERE x.value IS NOT NULL
     GROUP BY x.t, x.relation_id, x.column_name, x.value),
  -- The run's synced links' values of via-rule columns, each held from its link's
  -- transaction until the row's next link.
  sv AS MATERIALIZED (
    SELECT l.t, l.next_t, l.relation_id, l.pk, c.column_name, l.image ->> c.column_name::text AS value
      FROM links l
      JOIN (SELECT DISTINCT r.relation_id, r.column_name FROM rules r) c ON c.relation_id = l.relation_id
     WHERE l.op <> 'delete'),
  -- The synced rows each transaction's dependency changes reach (src_t: the link the
  -- row stands at then; NULL: it stands as stored).
  reach AS MATERIALIZED (
    SELECT y.t, y.relation_id, y.pk, max(y.src_t) AS src_t, max(y.event_ordinal) AS event_ordinal
      FROM (SELECT dv.t, s.relation_id, s.pk, s.t AS src_t, dv.event_ordinal
              FROM dv JOIN sv s ON s.relation_id = dv.relation_id AND s.column_name = dv.column_name AND s.value = dv.value
             WHERE s.t <= dv.t AND (s.next_t IS NULL OR s.next_t > dv.t)
            UNION ALL
            SELECT dv.t, v.relation_id, v.pk, NULL::int, dv.event_ordinal
              FROM dv
              CROSS JOIN LATERAL (SELECT v.relation_id, v.pk FROM synchro.rule_value v
                                   WHERE v.relation_id = dv.relation_id AND v.column_name = dv.column_name
                                     AND v.value_hash = synchro._scope_hash(dv.value) AND v.value = dv.value OFFSET 0) v
             WHERE NOT EXISTS (SELECT 1 FROM links f
                                WHERE f.relation_id = v.relation_id AND f.pk = v.pk AND f.link = 1 AND f.t <= dv.t)) y
     GROUP BY y.t, y.relation_id, y.pk),
  pts AS (
    -- The synced rows' links: touched.
    SELECT l.t, l.relation_id, l.pk, l.pk_int, l.table_id, l.op, l.version, l.image, l.image_bytes,
           greatest(l.event_ordinal, r.event_ordinal) AS event_ordinal, true AS touched, l.fresh
      FROM pg_temp.synchro_b_links l
      LEFT JOIN reach r ON r.t = l.t AND r.relation_id = l.relation_id AND r.pk = l.pk
     WHERE l.table_id IS NOT NULL
    UNION ALL
    -- Reached where the row has no link: as it stands at t.
    SELECT r.t, r.relation_id, r.pk, coalesce(l.pk_int, p.pk_int), rel.table_id, 'reach',
           coalesce(l.version, p.version), coalesce(l.image, p.image), coalesce(l.image_bytes, p.image_bytes),
           r.event_ordinal, false, false
      FROM reach r
      JOIN synchro.relation rel ON rel.relation_id = r.relation_id
      LEFT JOIN pg_temp.synchro_b_links l ON l.relation_id = r.relation_id AND l.pk = r.pk AND l.t = r.src_t
      LEFT JOIN LATERAL (SELECT p.pk_int, p.version, p.image, p.image_bytes FROM synchro.projection p
                          WHERE r.src_t IS NULL AND p.relation_id = r.relation_id AND p.pk = r.pk OFFSET 0) p ON true
     WHERE NOT EXISTS (SELECT 1 FROM pg_temp.synchro_b_links x
                        WHERE x.relation_id = r.relation_id AND x.pk = r.pk AND x.t = r.t))
  INSERT INTO pg_temp.synchro_b_points (t, relation_id, pk, pk_int, table_id, op, version, image, image_bytes,
                                        event_ordinal, touched, fresh, point, last)
  SELECT x.t, x.relation_id, x.pk, x.pk_int, x.table_id, x.op, x.version, x.image, x.image_bytes,
         x.event_ordinal, x.touched, x.fresh,
         pg_catalog.row_number() OVER (PARTITION BY x.relation_id, x.pk ORDER BY x.t),
         x.t = pg_catalog.max(x.t) OVER (PARTITION BY x.relation_id, x.pk)
    FROM pts x;
END
$$;

REVOKE ALL ON FUNCTION synchro._mat_run_points(bigint) FROM PUBLIC;

-- synchro.rebuild: a scope's current member rows from the materialized projections
-- (never live tables), keyset-paged in (table_id bytewise, typed key) order under an
-- authenticated session token (CONTRACT.md "Rebuild").
--
-- The first call fixes P, the materialization high-watermark; the last page's cursor
-- resumes pull after P. A row changed after P may arrive in its newer state; its
-- effect after P arrives again by pull, so the client converges either way. The
-- checksum is a SHA-256 chain over the delivered rows, carried in the token so the
-- session needs no server state.
CREATE OR REPLACE FUNCTION synchro.rebuild(client_id text, scope text, session text DEFAULT NULL, max_rows int DEFAULT 1000)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The page statement's custom plan costs about 0.8 ms to make on every call, and the
-- plan cache keeps choosing it (the generic plan's LIMIT is an unknown parameter); the
-- generic plan is the same index range scan. (The setting also holds inside the scope
-- authorizer this function calls.)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
  payload    text;
  parts      text[];
  g          record;
  rg         text;
  rg_now     text;
  p_point    text;
  last_tid   text := '';
  last_order bigint := -9223372036854775808;
  last_pk    text := '';
  h          bytea := decode(repeat('00', 32), 'hex');
  result     jsonb;
  horizon    pg_lsn;
  budget     bigint;
BEGIN
  -- SY400.
  PERFORM synchro._check_reader(client_id, scope, max_rows, 'max_rows');
  IF session IS NOT NULL THEN
    payload := synchro._token_payload(session, scope);
    parts := string_to_array(payload, ':');
    -- Authentic is not well-formed: parsed only in the exact shape this function writes
    -- (P, the last delivered table_id, its key order (int8) and key (UTF-8, in hex), the
    -- chain), so no payload the key signed fails with a cast error instead of SY400.
    IF payload IS NULL OR cardinality(parts) <> 8 OR parts[1] <> 'r1'
       OR parts[4] !~ E'^(s|t\\.[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8})$'
       OR parts[5] !~ '^([a-z][a-z0-9_]{0,62})?$'
       OR parts[6] !~ '^-?[0-9]{1,19}$' OR parts[7] !~ '^([0-9a-f]{2})*$' OR parts[8] !~ '^[0-9a-f]{64}$' THEN
      RAISE EXCEPTION 'invalid_argument: malformed rebuild session' USING ERRCODE = 'SY400';
    END IF;
    IF parts[6]::numeric NOT BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
      RAISE EXCEPTION 'invalid_argument: malformed rebuild session' USING ERRCODE = 'SY400';
    END IF;
    BEGIN
      last_pk := convert_from(decode(parts[7], 'hex'), 'UTF8');
    EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN
      RAISE EXCEPTION 'invalid_argument: malformed rebuild session' USING ERRCODE = 'SY400';
    END;
    last_pk := '';
  END IF;

  -- SY403.
  PERFORM synchro._authorize_scope(client_id, scope);

  -- SY409: a stream reset or a membership-rule change invalidated the session.
  SELECT sg.stream_generation, sg.token, p.materialized_commit_lsn, p.registry_generation, p.generation_start_lsn INTO g
    FROM synchro.progress p JOIN synchro.stream_generation sg ON sg.stream_generation = p.stream_generation;
  rg := synchro._scope_rule_generation(scope)::text;
  IF session IS NOT NULL AND (NOT FOUND OR parts[2] <> g.token::text OR parts[3] <> rg) THEN
    RAISE EXCEPTION 'rebuild_required: the rebuild session belongs to another stream or membership-rule generation'
      USING ERRCODE = 'SY409';
  END IF;
  -- A session whose position P fell below the retention horizon would hand out a
  -- cursor that is stale at once: start over now. P at generation_start is stale as
  -- synchro.pull says: once the horizon reaches the generation's start (a stream
  -- reset's catch-up transactions lie below it).
  IF session IS NOT NULL THEN
    SELECT r.horizon_commit_lsn INTO horizon FROM synchro.retention r WHERE r.stream_generation = g.stream_generation;
    IF horizon IS NOT NULL AND (CASE WHEN parts[4] = 's' THEN horizon >= g.generation_start_lsn
                                     ELSE split_part(parts[4], '.', 2)::pg_lsn < horizon END) THEN
      RAISE EXCEPTION 'rebuild_required: the rebuild session is older than the retention horizon' USING ERRCODE = 'SY409';
    END IF;
  END IF;

  -- SY503.
  PERFORM synchro._capture_pending(client_id);
  IF g.stream_generation IS NULL THEN
    RAISE EXCEPTION 'capture_pending: the change stream has not started yet; retry later' USING ERRCODE = 'SY503';
  END IF;
  -- A rule change of this prefix is activated but not materialized yet: the membership
  -- still follows the old rules, and the re-evaluation makes no pull effects, so a
  -- session bound to the new rule generation must not start before it.
  IF rg::bigint > coalesce(g.registry_generation, 0) THEN
    RAISE EXCEPTION 'capture_pending: a scope rule change is not materialized yet; retry later' USING ERRCODE = 'SY503';
  END IF;
  -- Likewise a projection bootstrap of a relation the prefix's rules name (directly or
  -- as a via dependency) that the main worker has not merged yet (docs/bootstrap.md):
  -- the projection is not the one the new rule generation describes.
  IF EXISTS (SELECT 1 FROM synchro.bootstrap b
               JOIN synchro.scope_rule s ON s.generation = g.registry_generation
                                        AND (s.relation_id = b.relation_id OR s.via_relation_id = b.relation_id)
              WHERE b.merged_at IS NULL AND b.kind = 'project' AND b.phase NOT IN ('merged', 'subsumed')
                AND b.stream_generation = g.stream_generation AND starts_with(scope, s.scope_prefix)) THEN
    RAISE EXCEPTION 'capture_pending: a projection bootstrap is not merged yet; retry later' USING ERRCODE = 'SY503';
  END IF;

  IF session IS NULL THEN
    -- P is read after the capture_pending check, so it covers this client's pushes.
    SELECT p.materialized_commit_lsn INTO g.materialized_commit_lsn FROM synchro.progress p
     WHERE p.stream_generation = g.stream_generation;
    p_point := CASE WHEN g.materialized_commit_lsn IS NULL THEN 's' ELSE 't.' || g.materialized_commit_lsn END;
  ELSE
    p_point := parts[4];
    IF parts[5] <> '' THEN
      last_tid := parts[5];
      last_order := parts[6]::bigint;
      last_pk := convert_from(decode(parts[7], 'hex'), 'UTF8');
    END IF;
    h := decode(parts[8], 'hex');
  END IF;

  -- The page, set-based in one statement (CONTRACT.md "Rebuild"): the keyset range plus
  -- one row, which says whether there is more; the checksum chain folded over the
  -- delivered rows in delivery order (synchro._chain_agg, from the session's h); the
  -- last delivered row's key; and the reply document. The document is to_jsonb of a
  -- row whose "rows" is an array of (table, pk, version, row) rows: converted once,
  -- with the stored images copied as jsonb, instead of a jsonb_build_object per row
  -- re-encoded by an array append, or text rendering parsed back.
  -- The page stops at max_rows or at the byte budget of row images, whichever comes
  -- first (CONTRACT.md "Pull"): a row is delivered while the running total of its
  -- projection's image_bytes stays within the budget, and the first one always (an
  -- image larger than the budget comes alone). Delivered rows are a prefix, so the
  -- chain, the last key and "more" follow them whichever bound stopped the page.
  budget := synchro._page_byte_budget();
  -- A first page reads P again in the page's own statement: a PL/pgSQL statement takes
  -- a new snapshot at READ COMMITTED, so a materialization that committed between the
  -- read above and this statement put rows in the page that were newer than that P,
  -- and pull from P delivered them again (TestBootstrapFilledTable, about one run in
  -- six on a busy stream). P and the rows now come from one snapshot; the read above
  -- stays for a stream that was reset in between (the token then says SY409).
  WITH pt AS (
    SELECT coalesce(CASE WHEN rebuild.session IS NULL THEN
                      (SELECT CASE WHEN p.materialized_commit_lsn IS NULL THEN 's' ELSE 't.' || p.materialized_commit_lsn END
                         FROM synchro.progress p WHERE p.stream_generation = g.stream_generation)
                    END, p_point) AS point
  ), page AS MATERIALIZED (
    SELECT m.table_id, m.pk_order, m.pk, pr.version, pr.image, r.key_type,
           row_number() OVER w AS ord,
           sum(coalesce(pr.image_bytes, 0)) OVER w AS run_bytes
      FROM synchro.membership m
      JOIN synchro.projection pr ON pr.relation_id = m.relation_id AND pr.pk = m.pk
      JOIN synchro.relation r ON r.relation_id = m.relation_id
     WHERE m.scope_hash = synchro._scope_hash(rebuild.scope) AND m.scope = rebuild.scope
       AND (m.table_id COLLATE "C", m.pk_order, m.pk COLLATE "C") > (last_tid COLLATE "C", last_order, last_pk COLLATE "C")
    WINDOW w AS (ORDER BY m.table_id COLLATE "C", m.pk_order, m.pk COLLATE "C" ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
     ORDER BY m.table_id COLLATE "C", m.pk_order, m.pk COLLATE "C"
     LIMIT max_rows + 1
  ), delivery AS (
    SELECT page.*, ord <= max_rows AND (ord = 1 OR run_bytes <= budget) AS sent FROM page
  ), agg AS (
    SELECT count(*) > count(*) FILTER (WHERE p.sent) AS more,
           max(p.ord) FILTER (WHERE p.sent) AS last_ord,
           coalesce(array_agg(x ORDER BY p.ord) FILTER (WHERE p.sent), '{}') AS rows,
           coalesce(synchro._chain_agg(h, convert_to(p.table_id, 'UTF8') || decode('00', 'hex') || convert_to(p.pk, 'UTF8') || decode('00', 'hex')
                                          || convert_to(p.version, 'UTF8') || decode('0a', 'hex') ORDER BY p.ord) FILTER (WHERE p.sent),
                    h) AS chain
      FROM delivery p
      CROSS JOIN LATERAL (
        SELECT p.table_id AS "table",
               CASE WHEN p.key_type = 'string' THEN to_jsonb(p.pk) ELSE to_jsonb(p.pk::bigint) END AS pk,
               p.version AS version,
               p.image AS "row") x
  ), pos AS (
    SELECT a.more, a.rows, a.chain,
           synchro._token(format('r1:%s:%s:%s:%s:%s:%s:%s', g.token, rg, (SELECT pt.point FROM pt),
                                 coalesce(l.table_id, last_tid), coalesce(l.pk_order, last_order),
                                 encode(convert_to(coalesce(l.pk, last_pk), 'UTF8'), 'hex'), encode(a.chain, 'hex')), rebuild.scope) AS tok
      FROM agg a LEFT JOIN page l ON l.ord = a.last_ord
  )
  SELECT CASE WHEN o.more THEN to_jsonb(d)
              ELSE to_jsonb(e) END,
         synchro._scope_rule_generation(rebuild.scope)::text
    INTO result, rg_now
    FROM pos o
    CROSS JOIN LATERAL (SELECT o.tok AS session, o.rows AS rows, true AS has_more) d
    CROSS JOIN LATERAL (SELECT o.tok AS session, o.rows AS rows, false AS has_more, encode(o.chain, 'hex') AS checksum,
                               synchro._cursor(g.token, rg, (SELECT pt.point FROM pt), rebuild.scope) AS cursor) e;
  -- The scope's rule generation again, with the page's snapshot: an activation that
  -- changed the scope's rules and committed after the check above, then materialized,
  -- would have this page read membership under the new rules for a session or cursor
  -- bound to the old ones (as synchro.pull checks; TestReadEdgePullRacesRuleChange).
  IF rg_now <> rg THEN
    RAISE EXCEPTION 'rebuild_required: the scope''s rules changed during the rebuild (registry activation); start again'
      USING ERRCODE = 'SY409';
  END IF;
  RETURN result;
END
$$;

REVOKE ALL ON FUNCTION synchro.rebuild(text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.rebuild(text, text, text, int) TO synchro_app;

-- synchro.pull: the scope's pull effects after the cursor, in stream-position order,
-- never beyond the materialization high-watermark read first (CONTRACT.md "Pull").
--
-- Positions compare as (commit_lsn, event_ordinal, effect_ordinal); transaction_end(L)
-- is (L, +inf, +inf) and generation_start is below everything. Cost per page is one
-- range scan of the effect primary key: O(page) whatever the length of the stream.
-- A page stops at max_changes or at the byte budget of row images
-- (synchro._page_byte_budget), whichever comes first, with at least one change.
-- Errors are checked in the contract's order: SY400, SY403, SY409, SY503.
CREATE OR REPLACE FUNCTION synchro.pull(client_id text, scope text, cursor text DEFAULT NULL, max_changes int DEFAULT 1000)
RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  payload  text;
  parts    text[];
  point    text[];
  g        record;
  hw       pg_lsn;
  horizon  pg_lsn;
  rule_gen bigint;
  c_lsn    pg_lsn;
  c_ev     int;
  c_eff    int;
  stale_at pg_lsn;
  changes  jsonb;
  n        int;
  n_sent   int;
  budget   bigint;
  last_point text;
  next_cur text;
BEGIN
  -- SY400: arguments and cursor authenticity.
  PERFORM synchro._check_reader(client_id, scope, max_changes, 'max_changes');
  IF cursor IS NOT NULL THEN
    payload := synchro._token_payload(cursor, scope);
    parts := string_to_array(payload, ':');
    -- Authentic is not well-formed: the payload is parsed only in the exact shape this
    -- function writes (an LSN and two int4 ordinals), so no payload the key signed
    -- (another version's, say) fails with a cast error instead of SY400.
    IF payload IS NULL OR cardinality(parts) <> 4 OR parts[1] <> 'c1'
       OR parts[4] !~ E'^(s|t\\.[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}|e\\.[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}\\.[0-9]{1,10}\\.[0-9]{1,10})$' THEN
      RAISE EXCEPTION 'invalid_argument: malformed cursor' USING ERRCODE = 'SY400';
    END IF;
    point := string_to_array(parts[4], '.');
    IF point[1] = 'e' AND (point[3]::bigint > 2147483647 OR point[4]::bigint > 2147483647) THEN
      RAISE EXCEPTION 'invalid_argument: malformed cursor' USING ERRCODE = 'SY400';
    END IF;
  END IF;

  -- SY403.
  PERFORM synchro._authorize_scope(client_id, scope);

  -- SY409: no cursor, another stream or rule generation, or below the horizon.
  IF cursor IS NULL THEN
    RAISE EXCEPTION 'rebuild_required: pull needs a cursor; start with synchro.rebuild' USING ERRCODE = 'SY409';
  END IF;
  SELECT sg.stream_generation, sg.token, p.materialized_commit_lsn, p.generation_start_lsn INTO g
    FROM synchro.progress p JOIN synchro.stream_generation sg ON sg.stream_generation = p.stream_generation;
  IF NOT FOUND OR parts[2] <> g.token::text OR parts[3] <> synchro._scope_rule_generation(scope)::text THEN
    RAISE EXCEPTION 'rebuild_required: the cursor belongs to another stream or membership-rule generation'
      USING ERRCODE = 'SY409';
  END IF;
  -- Points: s (generation_start), t.<lsn> (transaction_end), e.<lsn>.<event>.<effect>.
  -- stale_at is the lowest retention horizon that makes the cursor stale. Compaction
  -- removes whole source transactions up to and including the horizon: a position
  -- inside transaction L is stale once L is compacted, the end of L only once a later
  -- transaction is, generation_start once one at or after it is. Written once, checked twice (below); no
  -- horizon (NULL) makes no cursor stale.
  IF point[1] = 's' THEN
    -- generation_start: stale once a transaction after the generation's start is
    -- compacted. The ledger of a stream reset's new generation holds the catch-up's
    -- transactions below its start (their effects were never exposed): a horizon there
    -- removed nothing such a cursor needs, and a rebuild would hand out the same
    -- position again, a SY409 loop until the next write
    -- (TestResetGenerationStartCursorsSurviveCompaction).
    c_lsn := '0/0'; c_ev := -1; c_eff := -1; stale_at := g.generation_start_lsn;
  ELSIF point[1] = 't' THEN
    c_lsn := point[2]::pg_lsn; c_ev := 2147483647; c_eff := 2147483647;
    -- (The last LSN has no successor; nothing is ever compacted beyond it.)
    stale_at := CASE WHEN c_lsn = 'FFFFFFFF/FFFFFFFF' THEN c_lsn ELSE c_lsn + 1 END;
  ELSE
    c_lsn := point[2]::pg_lsn; c_ev := point[3]::int; c_eff := point[4]::int; stale_at := c_lsn;
  END IF;
  SELECT r.horizon_commit_lsn INTO horizon FROM synchro.retention r WHERE r.stream_generation = g.stream_generation;
  IF horizon >= stale_at THEN
    RAISE EXCEPTION 'rebuild_required: the cursor is older than the retention horizon' USING ERRCODE = 'SY409';
  END IF;

  -- SY503.
  PERFORM synchro._capture_pending(client_id);

  -- The high-watermark first: effects are read only up to it. Read it again now, after
  -- the capture_pending check: a materialization committed in between covered this
  -- client's push, and the page must then reach that push's effects (read-your-writes).
  SELECT p.materialized_commit_lsn INTO hw FROM synchro.progress p WHERE p.stream_generation = g.stream_generation;
  IF hw IS NULL THEN
    RETURN jsonb_build_object('changes', '[]'::jsonb, 'cursor', cursor, 'has_more', false);
  END IF;

  budget := synchro._page_byte_budget();
  -- The range scan reads the row bound plus one, whatever their sizes: image_bytes is
  -- stored with each effect, so a change beyond the budget is counted, never rendered.
  -- A change is sent while the running total of image bytes stays within the budget,
  -- and the first one always (an image larger than the budget comes alone); the sent
  -- changes are a prefix, so "more" is any change read but not sent.
  WITH page AS (
    SELECT e.commit_lsn, e.event_ordinal, e.effect_ordinal, e.table_id, e.pk, e.op, e.version, e.image, r.key_type,
           coalesce(e.image_bytes, 0) AS bytes
      FROM synchro.effect e JOIN synchro.relation r ON r.relation_id = e.relation_id
     WHERE e.stream_generation = g.stream_generation AND e.scope_hash = synchro._scope_hash(pull.scope) AND e.scope = pull.scope
       AND (e.commit_lsn, e.event_ordinal, e.effect_ordinal) > (c_lsn, c_ev, c_eff)
       AND e.commit_lsn <= hw
     ORDER BY e.commit_lsn, e.event_ordinal, e.effect_ordinal
     LIMIT max_changes + 1),
  numbered AS (
    SELECT page.*, row_number() OVER w AS rn, sum(bytes) OVER w AS run_bytes
      FROM page
    WINDOW w AS (ORDER BY commit_lsn, event_ordinal, effect_ordinal ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)),
  delivery AS (
    SELECT numbered.*, rn <= max_changes AND (rn = 1 OR run_bytes <= budget) AS sent FROM numbered)
  SELECT coalesce(jsonb_agg(
           CASE WHEN op = 'upsert' THEN
             jsonb_build_object('table', table_id, 'pk', CASE WHEN key_type = 'string' THEN to_jsonb(pk) ELSE to_jsonb(pk::bigint) END,
                                'op', 'upsert', 'version', version, 'row', image)
           ELSE
             jsonb_build_object('table', table_id, 'pk', CASE WHEN key_type = 'string' THEN to_jsonb(pk) ELSE to_jsonb(pk::bigint) END,
                                'op', 'delete')
           END ORDER BY rn) FILTER (WHERE sent), '[]'::jsonb),
         count(*) FILTER (WHERE sent),
         count(*),
         (array_agg(format('e.%s.%s.%s', commit_lsn, event_ordinal, effect_ordinal) ORDER BY rn DESC)
            FILTER (WHERE sent))[1],
         (SELECT r.horizon_commit_lsn FROM synchro.retention r WHERE r.stream_generation = g.stream_generation),
         synchro._scope_rule_generation(pull.scope)
    INTO changes, n_sent, n, last_point, horizon, rule_gen
    FROM delivery;
  -- The scope's rule generation again, with the page's snapshot: an activation that
  -- changed the scope's rules committed after the cursor's check above, and effects
  -- materialized under the new rules since, would otherwise reach a cursor of the old
  -- ones (a page of a state under neither rule set; TestReadEdgePullRacesRuleChange).
  IF rule_gen::text <> parts[3] THEN
    RAISE EXCEPTION 'rebuild_required: the scope''s rules changed (registry activation); rebuild'
      USING ERRCODE = 'SY409';
  END IF;
  -- The horizon again, read by the page's own statement and so with the page's
  -- snapshot: a compaction that committed after the check above (between two
  -- statements of this function) deleted effects this page would have held, and its
  -- horizon is then visible here. The page must not pass for complete. One snapshot for
  -- both, so a compaction that commits after the page read costs no needless SY409.
  IF horizon >= stale_at THEN
    RAISE EXCEPTION 'rebuild_required: the cursor is older than the retention horizon' USING ERRCODE = 'SY409';
  END IF;

  IF n > n_sent THEN
    -- Stop inside the stream (row bound or byte budget): the cursor is the position of
    -- the last change returned.
    next_cur := synchro._cursor(g.token, parts[3], last_point, scope);
    RETURN jsonb_build_object('changes', changes, 'cursor', next_cur, 'has_more', true);
  END IF;
  -- The end of the eligible effects: the high-watermark, so a quiet scope moves on.
  next_cur := synchro._cursor(g.token, parts[3], 't.' || hw, scope);
  RETURN jsonb_build_object('changes', changes, 'cursor', next_cur, 'has_more', false);
END
$$;

REVOKE ALL ON FUNCTION synchro.pull(text, text, text, int) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.pull(text, text, text, int) TO synchro_app;

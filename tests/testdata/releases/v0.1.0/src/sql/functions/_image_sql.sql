-- The SQL expression that renders the row image of relation rid under registry
-- generation gen: a jsonb object of the registered columns, each rendered by
-- synchro._render_kind from the registered column types (the registered shape, not
-- the live catalog), so the same value always renders to the same JSON and nothing
-- an application defined runs with the owner's rights.
--
-- src names the source: with live false, a jsonb of staged WAL values (the text
-- output of each column as a JSON string, json and jsonb columns as their JSON value:
-- runner/stage.go); with live true, a row alias of the live table (the baseline),
-- whose values are read through their output functions (format %s) like the WAL's.
-- jsonb_build_object takes at most 100 arguments: 50 columns a call, concatenated.
-- Made once per session and kept in pg_temp.synchro_image_sql (runner_stage_open):
-- the registration of a generation in effect never changes.
CREATE OR REPLACE FUNCTION synchro._image_sql(rid bigint, gen bigint, src text, live boolean) RETURNS text
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
DECLARE
  c     record;
  txt   text;
  expr  text;
  parts text[] := '{}';
  chunk text[] := '{}';
BEGIN
  SELECT x.sql INTO expr FROM pg_temp.synchro_image_sql x
   WHERE x.relation_id = rid AND x.generation = gen AND x.src = _image_sql.src AND x.live = _image_sql.live;
  IF FOUND THEN
    RETURN expr;
  END IF;
  FOR c IN
    SELECT x.name, x.typ, synchro._render_kind(x.typ) AS kind
      FROM synchro.registration g
     CROSS JOIN LATERAL unnest(g.columns, g.column_types) WITH ORDINALITY AS x(name, typ, n)
     WHERE g.relation_id = rid AND g.generation = gen
     ORDER BY x.n
  LOOP
    IF c.kind IS NULL OR c.typ IS NULL THEN
      RAISE EXCEPTION 'row image: registered column % of relation_id % has a type that cannot be rendered', c.name, rid
        USING ERRCODE = 'SY400';
    END IF;
    -- The column's text, as the WAL carries it.
    txt := CASE WHEN live THEN format('(CASE WHEN %1$s.%2$I IS NULL THEN NULL ELSE pg_catalog.format(%3$L, %1$s.%2$I) END)',
                                      src, c.name, '%s')
                ELSE format('(%s OPERATOR(pg_catalog.->>) %L)', src, c.name) END;
    expr := CASE
      WHEN c.kind = 'json' AND live THEN format('pg_catalog.to_jsonb(%s.%I)', src, c.name)
      WHEN c.kind = 'json' THEN format('(%s OPERATOR(pg_catalog.->) %L)', src, c.name)
      WHEN c.kind = 'label' THEN format('pg_catalog.to_jsonb(%s)', txt)
      WHEN c.kind = 'label_array' THEN format('pg_catalog.to_jsonb(%s::pg_catalog.text[])', txt)
      ELSE format('pg_catalog.to_jsonb(%s::%s)', txt, substr(c.kind, 6)) END;
    chunk := chunk || format('%L, %s', c.name, expr);
    IF cardinality(chunk) = 50 THEN
      parts := parts || format('pg_catalog.jsonb_build_object(%s)', array_to_string(chunk, ', '));
      chunk := '{}';
    END IF;
  END LOOP;
  IF cardinality(chunk) > 0 OR cardinality(parts) = 0 THEN
    parts := parts || format('pg_catalog.jsonb_build_object(%s)', array_to_string(chunk, ', '));
  END IF;
  expr := array_to_string(parts, ' OPERATOR(pg_catalog.||) ');
  INSERT INTO pg_temp.synchro_image_sql (relation_id, generation, src, live, sql)
  VALUES (rid, gen, _image_sql.src, _image_sql.live, expr);
  RETURN expr;
END
$$;

REVOKE ALL ON FUNCTION synchro._image_sql(bigint, bigint, text, boolean) FROM PUBLIC;

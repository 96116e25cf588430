-- The SQL expression that renders the row image of relation rid under registry
-- generation gen: a jsonb object of the registered columns, each rendered by
-- synchro._render_kind from the registered column types (the registered shape, not
-- the live catalog), so the same value always renders to the same JSON and nothing
-- an application defined runs with the owner's rights.
--
-- src names the source: with live false, a jsonb of staged WAL values (the text
-- output of each column as a JSON string; json and jsonb columns as their JSON value,
-- int2, int4 and int8 as numbers, bool as true or false: runner/stage.go); with live
-- true, a row alias of the live table (the baseline), whose values are read through
-- their output functions (format %s) like the WAL's.
--
-- Staged values whose type is one of bool, int2, int4, int8, text, varchar, uuid,
-- json and jsonb are already what to_jsonb() renders for that type (the runner stages
-- the first four as JSON literals, the next three as the string of their text output,
-- json and jsonb as their value). When every registered column has one of these types
-- (by OID: the runner decides by the WAL's type OIDs, which the relation check holds
-- equal to the registered ones), a staged object that has exactly the registered
-- columns is the image itself, and is taken as it is: rendering a jsonb object column
-- by column was the costliest part of materializing a row (about 5 us a row). Any
-- other staged object (a column the runner stages beyond this generation's, e.g. a
-- replica-identity column or one another generation registers; one it left out) goes
-- through the rendering below, which picks exactly the registered columns.
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
  names text[] := '{}';
  fast  boolean := NOT live;
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
    names := names || c.name::text;
    fast := fast AND c.typ IN ('pg_catalog.bool'::pg_catalog.regtype, 'pg_catalog.int2'::pg_catalog.regtype,
                               'pg_catalog.int4'::pg_catalog.regtype, 'pg_catalog.int8'::pg_catalog.regtype,
                               'pg_catalog.text'::pg_catalog.regtype, 'pg_catalog.varchar'::pg_catalog.regtype,
                               'pg_catalog.uuid'::pg_catalog.regtype, 'pg_catalog.json'::pg_catalog.regtype,
                               'pg_catalog.jsonb'::pg_catalog.regtype);
    IF cardinality(chunk) = 50 THEN
      parts := parts || format('pg_catalog.jsonb_build_object(%s)', array_to_string(chunk, ', '));
      chunk := '{}';
    END IF;
  END LOOP;
  IF cardinality(chunk) > 0 OR cardinality(parts) = 0 THEN
    parts := parts || format('pg_catalog.jsonb_build_object(%s)', array_to_string(chunk, ', '));
  END IF;
  expr := array_to_string(parts, ' OPERATOR(pg_catalog.||) ');
  IF fast THEN
    -- Exactly the registered columns: all of them (?&) and nothing else (removing
    -- them leaves an empty object).
    expr := format('(CASE WHEN %1$s OPERATOR(pg_catalog.?&) %2$L::pg_catalog.text[]
                           AND (%1$s OPERATOR(pg_catalog.-) %2$L::pg_catalog.text[]) OPERATOR(pg_catalog.=) ''{}''::pg_catalog.jsonb
                          THEN %1$s ELSE %3$s END)', src, names, expr);
  END IF;
  INSERT INTO pg_temp.synchro_image_sql (relation_id, generation, src, live, sql)
  VALUES (rid, gen, _image_sql.src, _image_sql.live, expr);
  RETURN expr;
END
$$;

REVOKE ALL ON FUNCTION synchro._image_sql(bigint, bigint, text, boolean) FROM PUBLIC;

-- The source refusals of a generated fence (issue 13, item 4b), as PL/pgSQL
-- statements that _fence_source splices into synchro._fence_<relation_id>().
--
-- A value PostgreSQL accepted must never poison the stream. What materialization could
-- not render into the row image is therefore refused at the source, by the fence, in
-- the writing statement: the writer learns at once (push reports the mutation
-- rejected with that code), nothing is written, and the message names the column and
-- rule, never the value (PostgreSQL's own error for bad json quotes the input in its
-- CONTEXT, so it is caught and replaced). For INSERT and UPDATE:
--
--   * json that jsonb refuses (a \u0000 escape, an unpaired surrogate, a number out of
--     numeric range) in a registered column of type json, json[] or a domain over
--     them: the original class-22 SQLSTATE (22P05, 22P02, 22003, ...). Composite
--     types holding json are not inspected: register their fields instead.
--   * registered values over 32 MiB together (33554432 bytes): 22001
--     (string_data_right_truncation). A value counts its bytes (text, varchar,
--     char), twice its bytes (bytea, rendered as hex), its text (json), or, for other
--     variable-length types, its stored size, and its text output when it is stored
--     in more than 8 kB (so a compressed value is not undercounted). Fixed-length
--     values are not counted. The image of a row then stays far below jsonb's 256 MB
--     limit, and a pull page of one change fits a client.
--
-- The registered key is checked by the template itself (1024 bytes, 22001), when
-- it enters (INSERT; a key cannot change).
--
-- The columns are the registered columns of the active and the pending registry
-- generation (the fence is regenerated at each activation; a column registered in the
-- pending generation is checked a little early, which only refuses what would be
-- refused after activation). Every name is quoted with %I and every function
-- qualified: the fence runs as the owner, possibly with the writer's search_path.
CREATE OR REPLACE FUNCTION synchro._fence_value_checks(rid bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c record;
  sizes text[] := '{}';
  out text := '';
BEGIN
  FOR c IN
    WITH cols AS (
      SELECT DISTINCT a.attname, a.atttypid
        FROM synchro.relation r
        JOIN synchro.registration g ON g.relation_id = r.relation_id
        JOIN synchro.registry_generation rg ON rg.generation = g.generation AND rg.state IN ('active', 'pending')
        JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = ANY (g.columns) AND a.attnum > 0 AND NOT a.attisdropped
       WHERE r.relation_id = rid AND a.attname <> r.key_column)
    SELECT cols.attname, t.typlen, base.typname AS base_name, base.oid AS base_oid,
           -- json itself, an array of json, or domains over either, at any depth: an
           -- array of a domain over a domain over json went unchecked (one level only),
           -- and its \u0000 then failed the row image (22P05), a good transaction
           -- quarantined (TestBoundaryUnrenderableValueRefusedAtSource).
           (base.oid = 'json'::regtype
            OR (base.typelem <> 0 AND base.typlen = -1
                AND (synchro._base_type(base.typelem)).oid = 'json'::regtype)) AS holds_json
      FROM cols
      JOIN pg_type t ON t.oid = cols.atttypid
      CROSS JOIN LATERAL (
        WITH RECURSIVE dom(oid, depth) AS (
          SELECT cols.atttypid, 0
          UNION ALL
          SELECT d.typbasetype, dom.depth + 1 FROM dom JOIN pg_type d ON d.oid = dom.oid
           WHERE d.typtype = 'd' AND dom.depth < 32)
        SELECT b.oid, b.typname, b.typelem, b.typlen FROM dom JOIN pg_type b ON b.oid = dom.oid
         ORDER BY dom.depth DESC LIMIT 1) base
     ORDER BY cols.attname
  LOOP
    IF c.holds_json THEN
      out := out || format($chk$
    BEGIN
      PERFORM pg_catalog.to_jsonb(NEW.%4$s);
    EXCEPTION WHEN data_exception THEN
      GET STACKED DIAGNOSTICS refused := RETURNED_SQLSTATE;
      RAISE EXCEPTION 'registered value refused: column %% of relation_id %% holds json that jsonb cannot represent', %2$L, %3$s
        USING ERRCODE = refused;
    END;$chk$, c.attname, c.attname, rid, synchro._pl_ident(c.attname));
    END IF;
    IF c.typlen > 0 THEN
      CONTINUE; -- fixed length: small, not counted
    END IF;
    sizes := sizes || CASE
      -- octet_length of these reads the stored length: no detoasting.
      WHEN c.base_oid IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype)
        THEN format('coalesce(pg_catalog.octet_length(NEW.%s), 0)', synchro._pl_ident(c.attname))
      WHEN c.base_oid = 'bytea'::regtype
        THEN format('coalesce(2 * pg_catalog.octet_length(NEW.%s), 0)', synchro._pl_ident(c.attname))
      WHEN c.base_oid = 'json'::regtype
        THEN format('coalesce(pg_catalog.octet_length(NEW.%s::pg_catalog.text), 0)', synchro._pl_ident(c.attname))
      ELSE format('coalesce(CASE WHEN pg_catalog.pg_column_size(NEW.%1$s) <= 8192 THEN pg_catalog.pg_column_size(NEW.%1$s) '
                  'ELSE pg_catalog.octet_length(NEW.%1$s::pg_catalog.text) END, 0)', synchro._pl_ident(c.attname))
      END;
  END LOOP;
  IF cardinality(sizes) > 0 THEN
    out := out || format($chk$
    IF 0::pg_catalog.int8 + %1$s > 33554432 THEN
      RAISE EXCEPTION 'registered values of relation_id %% are over 32 MiB together (documented row image limit)', %2$s
        USING ERRCODE = 'string_data_right_truncation';
    END IF;$chk$, array_to_string(sizes, ' + '), rid);
  END IF;
  RETURN out;
END
$$;

REVOKE ALL ON FUNCTION synchro._fence_value_checks(bigint) FROM PUBLIC;

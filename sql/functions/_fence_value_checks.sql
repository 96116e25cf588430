-- The source refusals of a generated fence (issue 13, item 4b), as PL/pgSQL
-- statements that _fence_source splices into synchro._fence_<relation_id>().
--
-- A value PostgreSQL accepted must never poison or stop the stream. What the decoders
-- or materialization could not render is therefore refused at the source, by the
-- fence, in the writing statement: the writer learns at once (push reports the
-- mutation rejected with that code), nothing is written, and the message names the
-- column or the rule, never the value (PostgreSQL's own error for bad json quotes the
-- input in its CONTEXT, so it is caught and replaced). For INSERT and UPDATE:
--
--   * json that jsonb refuses (a \u0000 escape, an unpaired surrogate, a number out of
--     numeric range) in a registered column of type json, json[] or a domain over
--     them: the original class-22 SQLSTATE (22P05, 22P02, 22003, ...). Composite
--     types holding json are not inspected: register their fields instead.
--   * registered json or jsonb nested deeper than 8,000 levels: 22001. The runner
--     validates a row image's json with Go's encoding/json, which stops at 10,000
--     levels, and a pull page nests the image a few levels deeper still; PostgreSQL
--     itself accepts about 12,000 with its default max_stack_depth.
--   * registered values over 32 MiB together (33554432 bytes) as the row image holds
--     them: 22001 (string_data_right_truncation). Text counts its bytes, bytea twice
--     its bytes (rendered as hex), json, jsonb and every other variable-length
--     built-in type (arrays and domains included) the text of its to_jsonb, an enum
--     array its labels; fixed-length values are not counted. The
--     image of a row then stays far below jsonb's 256 MB limit, and a pull page of one
--     change fits a client. Size on disk says nothing here: a numeric keeps its weight
--     and display scale, not its digits, so round(1e131071, 16383) is a few bytes that
--     render as 147,456 characters, and jsonb numbers render the same way.
--   * the whole row over 128 MiB as text (record_out of NEW: every column, registered
--     or not, including one added after this fence was generated): 22001. The
--     decoders render every column of a published row as text in the walsender, and a
--     rendering past 1 GB fails there, at every restart: the stream would stop for
--     good (7,500 such numerics in a numeric[] are a few kB on disk and 1.1 GB as
--     text). 128 MiB leaves room for wal2json's escaping (up to six bytes a
--     character): 768 MB.
--     A rendering that fails in the writer (out of memory, 54000; an allocation over
--     1 GB, XX000; any other error but a cancel) is the same refusal: the walsender
--     would fail the same way.
--   * registered xml (or xml[]) that is not well-formed content: 2200N.
--   The fence renders under the runner's settings (its SET clauses), so these sizes
--   are the runner's, whatever the writer's extra_float_digits or bytea_output.
--
-- Rendering calls each type's output function, to_jsonb (built-in types only) or
-- record_out directly, never a cast to text: the writer may own the type (an enum's
-- array, a composite, the row type) and give it a cast to text whose function would
-- run here with the owner's rights (TestFenceRunsNoCallerCast). Output functions are
-- C; only a superuser defines one. These expressions are safe only for the types the
-- columns had when the fence was generated: synchro._fence_type_checks runs first.
--
-- The key is checked by the template itself (1024 bytes, 22001), when it enters
-- (INSERT; a key cannot change).
--
-- The registered columns are those of the active and the pending registry generation
-- (the fence is regenerated at each activation; a column registered in the pending
-- generation is checked a little early, which only refuses what would be refused
-- after activation). Every name is quoted with %I and every function qualified: the
-- fence runs as the owner, possibly with the writer's search_path.
CREATE OR REPLACE FUNCTION synchro._fence_value_checks(rid bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  c record;
  cheap text[] := '{}';    -- sizes read from the stored length: no rendering
  rendered text[] := '{}'; -- sizes that render the value, inside a block that catches overflow
  out text := '
    sz := 0; big := false; deep := false;';
BEGIN
  FOR c IN
    WITH cols AS (
      SELECT DISTINCT a.attname, a.atttypid
        FROM synchro.relation r
        JOIN synchro.registration g ON g.relation_id = r.relation_id
        JOIN synchro.registry_generation rg ON rg.generation = g.generation AND rg.state IN ('active', 'pending')
        JOIN pg_attribute a ON a.attrelid = r.relid AND a.attname = ANY (g.columns) AND a.attnum > 0 AND NOT a.attisdropped
       WHERE r.relation_id = rid AND a.attname <> r.key_column)
    SELECT cols.attname, t.typlen, base.oid AS base_oid,
           -- qualified: the fence pins its search_path, but says what it means anyway
           (SELECT format('%I.%I', n.nspname, f.proname) FROM pg_proc f JOIN pg_namespace n ON n.oid = f.pronamespace
             WHERE f.oid = base.typoutput) AS output,
           -- a built-in scalar, or an array of one, through domains: the image is
           -- to_jsonb of it, which looks up no cast for a built-in type; not an enum
           -- (the application's type: to_jsonb would look up its cast to json)
           (SELECT e.oid < 16384 AND e.typtype <> 'e'
              FROM synchro._base_type(CASE WHEN base.typelem <> 0 AND base.typlen = -1 THEN base.typelem ELSE base.oid END) e)
             AS builtin,
           -- json or jsonb itself, an array of either, or domains over them, at any
           -- depth: an array of a domain over a domain over json went unchecked (one
           -- level only), and its \u0000 then failed the row image (22P05), a good
           -- transaction quarantined (TestBoundaryUnrenderableValueRefusedAtSource).
           CASE WHEN base.oid IN ('json'::regtype, 'jsonb'::regtype) THEN base.oid
                WHEN base.typelem <> 0 AND base.typlen = -1
                 AND (synchro._base_type(base.typelem)).oid IN ('json'::regtype, 'jsonb'::regtype)
                THEN (synchro._base_type(base.typelem)).oid END AS json_kind,
           -- xml itself, or an array of it, through domains
           CASE WHEN base.oid = 'xml'::regtype THEN 'scalar'
                WHEN base.typelem <> 0 AND base.typlen = -1 AND (synchro._base_type(base.typelem)).oid = 'xml'::regtype
                THEN 'array' END AS xml_kind
      FROM cols
      JOIN pg_type t ON t.oid = cols.atttypid
      CROSS JOIN LATERAL synchro._base_type(cols.atttypid) base
     ORDER BY cols.attname
  LOOP
    -- xml that is not well-formed content: xmlroot writes its version argument into
    -- the declaration unescaped (any role may call it), and the stored value then does
    -- not read back as xml in the runner (2200N: a good transaction quarantined).
    IF c.xml_kind = 'scalar' THEN
      out := out || format($chk$
    IF NEW.%3$s IS NOT NULL AND NOT pg_catalog.xml_is_well_formed_content(pg_catalog.textin(pg_catalog.xml_out(NEW.%3$s))) THEN
      RAISE EXCEPTION 'registered value refused: column %% of relation_id %% holds xml that is not well-formed', %1$L, %2$s
        USING ERRCODE = 'invalid_xml_content';
    END IF;$chk$, c.attname, rid, synchro._pl_ident(c.attname));
    ELSIF c.xml_kind = 'array' THEN
      out := out || format($chk$
    IF NEW.%3$s IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(NEW.%3$s) x
         WHERE NOT pg_catalog.xml_is_well_formed_content(pg_catalog.textin(pg_catalog.xml_out(x)))) THEN
      RAISE EXCEPTION 'registered value refused: column %% of relation_id %% holds xml that is not well-formed', %1$L, %2$s
        USING ERRCODE = 'invalid_xml_content';
    END IF;$chk$, c.attname, rid, synchro._pl_ident(c.attname));
    END IF;
    IF c.json_kind IS NOT NULL THEN
      -- to_jsonb parses json (jsonb refuses what it cannot hold) and is the identity
      -- for jsonb; the depth is the level of the deepest item (jsonpath's .** is C, and
      -- stops descending at the level asked for); the size is the text of the jsonb.
      out := out || format($chk$
    BEGIN
      jb := pg_catalog.to_jsonb(NEW.%3$s);
      deep := deep OR coalesce(pg_catalog.jsonb_path_exists(jb, 'strict $.**{8001}'::pg_catalog.jsonpath), false);
      sz := sz + coalesce(pg_catalog.octet_length(pg_catalog.textin(pg_catalog.jsonb_out(jb))), 0);
    EXCEPTION WHEN data_exception THEN
      GET STACKED DIAGNOSTICS refused := RETURNED_SQLSTATE;
      RAISE EXCEPTION 'registered value refused: column %% of relation_id %% holds json that jsonb cannot represent', %1$L, %2$s
        USING ERRCODE = refused;
    WHEN OTHERS THEN
      big := true;
    END;$chk$, c.attname, rid, synchro._pl_ident(c.attname));
    ELSIF c.typlen > 0 THEN
      CONTINUE; -- fixed length: small, not counted
    ELSIF c.base_oid IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype) THEN
      -- octet_length of these reads the stored length: no detoasting.
      cheap := cheap || format('coalesce(pg_catalog.octet_length(NEW.%s), 0)', synchro._pl_ident(c.attname));
    ELSIF c.base_oid = 'bytea'::regtype THEN
      cheap := cheap || format('coalesce(2 * pg_catalog.octet_length(NEW.%s), 0)', synchro._pl_ident(c.attname));
    ELSIF c.builtin THEN
      -- As the image holds it: to_jsonb's text, not the type's own (a float8 array's
      -- 5e-324 is 7 characters from float8out and 328 as the jsonb number it becomes).
      rendered := rendered || format('coalesce(pg_catalog.octet_length(pg_catalog.textin(pg_catalog.jsonb_out(pg_catalog.to_jsonb(NEW.%s)))), 0)',
                                     synchro._pl_ident(c.attname));
    ELSE
      -- An enum array (or a domain over one): the image holds its labels.
      rendered := rendered || format('coalesce(pg_catalog.octet_length(pg_catalog.textin(%s(NEW.%s))), 0)',
                                     c.output, synchro._pl_ident(c.attname));
    END IF;
  END LOOP;
  IF cardinality(cheap) > 0 THEN
    out := out || format($chk$
    sz := sz + %s;$chk$, array_to_string(cheap, ' + '));
  END IF;
  IF cardinality(rendered) > 0 THEN
    out := out || format($chk$
    BEGIN
      sz := sz + %s;
    EXCEPTION WHEN OTHERS THEN
      big := true;
    END;$chk$, array_to_string(rendered, ' + '));
  END IF;
  RETURN out || format($chk$
    IF deep THEN
      RAISE EXCEPTION 'registered json of relation_id %% is nested deeper than 8000 levels (documented row image limit)', %1$s
        USING ERRCODE = 'string_data_right_truncation';
    END IF;
    IF big OR sz > 33554432 THEN
      RAISE EXCEPTION 'registered values of relation_id %% are over 32 MiB together as text, or cannot be rendered (documented row image limit)', %1$s
        USING ERRCODE = 'string_data_right_truncation';
    END IF;
    BEGIN
      sz := pg_catalog.octet_length(pg_catalog.textin(pg_catalog.record_out(NEW)));
    EXCEPTION WHEN OTHERS THEN
      sz := NULL;
    END;
    IF sz IS NULL OR sz > 134217728 THEN
      RAISE EXCEPTION 'row of relation_id %% is over 128 MiB as text, or cannot be rendered as text (documented row limit)', %1$s
        USING ERRCODE = 'string_data_right_truncation';
    END IF;$chk$, rid);
END
$$;

REVOKE ALL ON FUNCTION synchro._fence_value_checks(bigint) FROM PUBLIC;

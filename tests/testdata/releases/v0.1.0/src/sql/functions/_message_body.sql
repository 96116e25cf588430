-- The authenticated body of a logical message of the pack (docs/wire-format.md): its
-- fields in a fixed order, each as <length>:<text>, where <text> is the field as
-- ->> renders it (a string's characters, a number's digits) and a null or absent
-- field is just ':'. Length-prefixed, so the encoding is injective whatever the
-- fields hold; made from ->> and concat only, so hostile content cannot make it fail.
--
--   synchro.fence:    v kind relation_id schema table op old_key new_key version
--                     fence_id ordinal table_id pk capture_key
--   synchro.registry: v generation previous
--
-- The fence template builds the same text inline from its variables (_fence_source).
CREATE OR REPLACE FUNCTION synchro._message_body(prefix text, c jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
-- One expression, so the planner inlines it (materialization authenticates every
-- staged message in one statement).
AS $$
  SELECT CASE prefix
    WHEN 'synchro.fence' THEN pg_catalog.concat(
            pg_catalog.length(c ->> 'v'), ':', c ->> 'v',
            pg_catalog.length(c ->> 'kind'), ':', c ->> 'kind',
            pg_catalog.length(c ->> 'relation_id'), ':', c ->> 'relation_id',
            pg_catalog.length(c ->> 'schema'), ':', c ->> 'schema',
            pg_catalog.length(c ->> 'table'), ':', c ->> 'table',
            pg_catalog.length(c ->> 'op'), ':', c ->> 'op',
            pg_catalog.length(c ->> 'old_key'), ':', c ->> 'old_key',
            pg_catalog.length(c ->> 'new_key'), ':', c ->> 'new_key',
            pg_catalog.length(c ->> 'version'), ':', c ->> 'version',
            pg_catalog.length(c ->> 'fence_id'), ':', c ->> 'fence_id',
            pg_catalog.length(c ->> 'ordinal'), ':', c ->> 'ordinal',
            pg_catalog.length(c ->> 'table_id'), ':', c ->> 'table_id',
            pg_catalog.length(c ->> 'pk'), ':', c ->> 'pk',
            pg_catalog.length(c ->> 'capture_key'), ':', c ->> 'capture_key')
    WHEN 'synchro.registry' THEN pg_catalog.concat(
            pg_catalog.length(c ->> 'v'), ':', c ->> 'v',
            pg_catalog.length(c ->> 'generation'), ':', c ->> 'generation',
            pg_catalog.length(c ->> 'previous'), ':', c ->> 'previous')
  END
$$;

REVOKE ALL ON FUNCTION synchro._message_body(text, jsonb) FROM PUBLIC;

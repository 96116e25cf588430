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
LANGUAGE sql IMMUTABLE
AS $$
  SELECT pg_catalog.string_agg(pg_catalog.concat(pg_catalog.length(f.v), ':', f.v), '' ORDER BY f.n)
    FROM pg_catalog.unnest(CASE prefix
           WHEN 'synchro.fence' THEN ARRAY[
             c ->> 'v', c ->> 'kind', c ->> 'relation_id', c ->> 'schema', c ->> 'table', c ->> 'op',
             c ->> 'old_key', c ->> 'new_key', c ->> 'version', c ->> 'fence_id', c ->> 'ordinal',
             c ->> 'table_id', c ->> 'pk', c ->> 'capture_key']
           WHEN 'synchro.registry' THEN ARRAY[c ->> 'v', c ->> 'generation', c ->> 'previous']
         END) WITH ORDINALITY AS f(v, n)
$$;

REVOKE ALL ON FUNCTION synchro._message_body(text, jsonb) FROM PUBLIC;

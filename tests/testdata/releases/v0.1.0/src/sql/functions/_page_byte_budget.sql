-- The byte budget of a pull or rebuild page (CONTRACT.md "Pull"): the most bytes of row
-- images (image_bytes: octet_length of each image's JSON text) a page holds; a page
-- holds at least one change or row whatever its size. The owner-only setting
-- page_byte_budget (validated when written, migration 00005); 8 MiB if it is absent.
CREATE OR REPLACE FUNCTION synchro._page_byte_budget() RETURNS bigint
LANGUAGE sql STABLE
-- No SET clause: an internal helper, called only from functions that pinned
-- search_path already.
AS $$
  SELECT coalesce((SELECT s.value::bigint FROM synchro.setting s WHERE s.name = 'page_byte_budget'), 8388608)
$$;

REVOKE ALL ON FUNCTION synchro._page_byte_budget() FROM PUBLIC;

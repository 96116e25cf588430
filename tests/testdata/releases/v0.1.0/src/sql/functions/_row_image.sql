-- The row image Synchro returns: to_jsonb() of the registered columns only. Callers
-- render the row under pinned TimeZone/DateStyle/IntervalStyle/extra_float_digits.
CREATE OR REPLACE FUNCTION synchro._row_image(full_row jsonb, columns name[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT CASE WHEN full_row IS NULL THEN NULL ELSE
    coalesce((SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(full_row) e
               WHERE e.key = ANY (columns::text[])), '{}'::jsonb) END
$$;

REVOKE ALL ON FUNCTION synchro._row_image(jsonb, name[]) FROM PUBLIC;
-- Not executable by synchro_app (CONTRACT.md, Roles): push inlines the same projection.
REVOKE ALL ON FUNCTION synchro._row_image(jsonb, name[]) FROM synchro_app;

-- An interval setting of synchro.setting (retention: docs/retention.md), or NULL when
-- it is 'never', missing or unreadable: its callers then keep what the setting would have let
-- them delete. The CHECK on synchro.setting refuses such values when written; this is
-- the second line, so a bad row can never turn into a deletion.
CREATE OR REPLACE FUNCTION synchro._setting_interval(setting_name text) RETURNS interval
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
-- Interval input reads the same whatever the caller's session style.
SET "IntervalStyle" TO 'postgres'
AS $$
DECLARE
  v text;
  i interval;
BEGIN
  SELECT s.value INTO v FROM synchro.setting s WHERE s.name = setting_name;
  IF v IS NULL OR v = 'never' THEN
    RETURN NULL; -- 'never': outcome_retention's default (the contract keeps outcomes)
  END IF;
  BEGIN
    i := v::interval;
  EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
  END;
  IF i < interval '0' THEN
    RETURN NULL;
  END IF;
  RETURN i;
END
$$;

REVOKE ALL ON FUNCTION synchro._setting_interval(text) FROM PUBLIC;

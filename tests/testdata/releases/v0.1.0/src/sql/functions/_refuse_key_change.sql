-- BEFORE UPDATE guard, fired only when the key value changes (trigger WHEN clause).
-- Side-effect free: it only refuses. Moving identity needs a delete and an insert.
CREATE OR REPLACE FUNCTION synchro._refuse_key_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
  RAISE EXCEPTION 'primary-key value change on a registered row is not supported (delete and insert instead)'
    USING ERRCODE = 'feature_not_supported';
END
$$;

REVOKE ALL ON FUNCTION synchro._refuse_key_change() FROM PUBLIC;

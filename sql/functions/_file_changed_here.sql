-- Whether relation rel's pg_class row was written by the current transaction (or one
-- of its subtransactions): what a new relation file in this transaction looks like
-- (CREATE, TRUNCATE, a rewrite), the only case in which PostgreSQL accepts COPY …
-- FREEZE into it. The fence asks it only once the relation's file differs from the one
-- it was generated with: a rewrite in an earlier transaction (VACUUM FULL, CLUSTER, a
-- volatile DEFAULT) also changes the file, and the fence then took every later insert
-- whose statement text matched its pattern for a COPY FREEZE, and ran that pattern over
-- the whole statement once per row (TestDdlEdgeRewriteDoesNotRefuseOrdinaryInsert).
-- The row's xmin is visible to this transaction's snapshot, so "in progress" can only
-- be this transaction's own. What is left: any write of the row in this transaction
-- counts, not only a new file, so a GRANT or ADD COLUMN on the table, after a rewrite
-- since the fence was generated, followed in the same transaction by an INSERT whose
-- text holds "copy" and then "freeze", is still refused (docs/errors.md).
CREATE OR REPLACE FUNCTION synchro._file_changed_here(rel oid) RETURNS boolean
LANGUAGE plpgsql
STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  changed boolean;
BEGIN
  -- The row's 32-bit xmin made a full xid next to this transaction's own (a
  -- subtransaction's xid is above it): the nearest full xid with those low 32 bits.
  -- Every unfrozen xid a snapshot can see is within 2^31 of it.
  SELECT coalesce(pg_catalog.pg_xact_status((x.cur + x.d)::text::xid8) = 'in progress', false)
    INTO changed
    FROM (SELECT s.cur,
                 CASE WHEN s.d > 2147483647 THEN s.d - 4294967296
                      WHEN s.d < -2147483648 THEN s.d + 4294967296 ELSE s.d END AS d
            FROM (SELECT pg_catalog.pg_current_xact_id()::text::int8 AS cur,
                         c.xmin::text::int8 - (pg_catalog.pg_current_xact_id()::text::int8 & 4294967295) AS d
                    FROM pg_catalog.pg_class c
                   WHERE c.oid = rel AND c.xmin::text::int8 >= 3) s) x
   WHERE x.cur + x.d >= 3;
  RETURN coalesce(changed, false);
EXCEPTION WHEN invalid_parameter_value THEN
  -- A frozen row's raw xmin more than 2^31 transactions old maps to a "future" xid
  -- (22023): not this transaction's.
  RETURN false;
END
$$;

REVOKE ALL ON FUNCTION synchro._file_changed_here(oid) FROM PUBLIC;

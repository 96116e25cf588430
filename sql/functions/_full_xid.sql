-- The xid8 of xid, the 32-bit id of a pgoutput Begin message, next to snap_xmax, the
-- 64-bit xmax of a current snapshot (synchro._xid_nearest owns the rule).
-- plpgsql, not sql: synchro._xid_nearest installs after this file.
CREATE OR REPLACE FUNCTION synchro._full_xid(xid bigint, snap_xmax numeric) RETURNS xid8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
  RETURN synchro._xid_nearest(xid, snap_xmax::bigint)::text::xid8;
END
$$;

REVOKE ALL ON FUNCTION synchro._full_xid(bigint, numeric) FROM PUBLIC;

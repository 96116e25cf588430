-- The 64-bit transaction id of xid, the 32-bit id of a pgoutput Begin message, next to
-- snap_xmax, the 64-bit xmax of a current snapshot. Live xids lie within 2^31 of each
-- other: the epoch that puts xid nearest to xmax is the one. (A transaction just
-- decoded can still be >= xmax: xmax only moves past it when it leaves the proc array.)
CREATE OR REPLACE FUNCTION synchro._full_xid(xid bigint, snap_xmax numeric) RETURNS xid8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT (CASE WHEN w.f > snap_xmax + 2147483648 THEN w.f - 4294967296
               WHEN w.f < snap_xmax - 2147483648 THEN w.f + 4294967296
               ELSE w.f END)::pg_catalog.text::pg_catalog.xid8
    FROM (SELECT pg_catalog.floor(snap_xmax / 4294967296) * 4294967296 + xid AS f) w
$$;

REVOKE ALL ON FUNCTION synchro._full_xid(bigint, numeric) FROM PUBLIC;

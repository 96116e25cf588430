-- The 64-bit transaction id whose low 32 bits are xid (a pgoutput Begin message's
-- 32-bit id) nearest to near, a 64-bit id such as a current snapshot's xmax. Live xids
-- lie within 2^31 of each other, so the nearest epoch is the one. (A transaction just
-- decoded can still be >= xmax: xmax only moves past it when it leaves the proc array.)
-- bigint arithmetic only: numeric cost ~10 µs per call on the materialization path.
-- The one owner of this rule: synchro._full_xid and synchro._await_visible_all use it.
CREATE OR REPLACE FUNCTION synchro._xid_nearest(xid bigint, near bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  -- (xid - low32(near)) taken into [-2^31, 2^31) modulo 2^32, added to near.
  SELECT near + ((((xid - (near & 4294967295)) % 4294967296) + 6442450944) % 4294967296) - 2147483648
$$;

REVOKE ALL ON FUNCTION synchro._xid_nearest(bigint, bigint) FROM PUBLIC;

-- Operator: where a reset stands. phase is one of requested, staging, catching_up,
-- ready, activated, aborted, failed; detail is a bounded failure class or note, never
-- row values. LSNs are text; snapshot_boundary is the exported snapshot's xmin:xmax:xip.
CREATE OR REPLACE FUNCTION synchro.reset_status(reset_id uuid) RETURNS jsonb
LANGUAGE plpgsql
STABLE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.reset;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = reset_status.reset_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'reset_status: unknown reset_id' USING ERRCODE = 'SY400';
  END IF;
  RETURN jsonb_build_object(
    'reset_id', r.reset_id,
    'phase', r.phase,
    'candidate_slot', r.candidate_slot,
    'consistent_point', r.consistent_point::text,
    'snapshot_boundary', r.snapshot_boundary::text,
    'activation_barrier', r.activation_barrier::text,
    'detail', r.detail);
END
$$;

REVOKE ALL ON FUNCTION synchro.reset_status(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.reset_status(uuid) TO synchro_operator;

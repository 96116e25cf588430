-- Operator: activates a reset in phase ready, in this one transaction (ADR 001):
-- verifies the staged state, the candidate slot and the fence coverage through the
-- activation barrier, and that the old stream is still the blocked one; installs the
-- staged projections; creates the new stream generation, whose generation_start is the
-- baseline through the barrier (the catch-up's effects are never exposed: clients
-- rebuild); makes every old cursor and rebuild token stale (they bind to the old
-- generation's token: SY409); and switches the durable active-slot pointer (the active
-- stream_generation row) to the candidate slot, which the runner follows when it next
-- loops. The old slot and the old projections (schema synchro_retired) stay until the
-- runner's controlled cleanup, after this commit.
CREATE OR REPLACE FUNCTION synchro.activate_reset(reset_id uuid) RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r      synchro.reset;
  p      synchro.progress;
  sp     record;
  slot   record;
  t      text;
  n      bigint;
BEGIN
  SELECT * INTO r FROM synchro.reset x WHERE x.reset_id = activate_reset.reset_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'activate_reset: unknown reset_id' USING ERRCODE = 'SY400';
  END IF;
  IF r.phase <> 'ready' THEN
    RAISE EXCEPTION 'activate_reset: refused in phase %', r.phase USING ERRCODE = 'SY400';
  END IF;

  -- The old stream is still the active one, and still blocked (the open reset blocks
  -- it; the progress lock keeps any materialization out until this commits).
  SELECT * INTO STRICT p FROM synchro.progress FOR UPDATE;
  IF p.stream_generation <> r.source_generation THEN
    RAISE EXCEPTION 'activate_reset: refused: the active stream is not the one this reset replaces' USING ERRCODE = 'SY400';
  END IF;

  -- The staged state is complete: staged, caught up exactly through the barrier.
  FOREACH t IN ARRAY synchro._reset_tables() LOOP
    IF to_regclass(format('synchro_reset.%I', t)) IS NULL THEN
      RAISE EXCEPTION 'activate_reset: refused: the staged state is incomplete' USING ERRCODE = 'SY400';
    END IF;
  END LOOP;
  EXECUTE 'SELECT stream_generation, processed_end_lsn, registry_generation FROM synchro_reset.progress' INTO sp;
  IF sp.stream_generation IS DISTINCT FROM r.target_generation OR r.activation_barrier IS NULL
     OR sp.processed_end_lsn IS DISTINCT FROM r.activation_barrier THEN
    RAISE EXCEPTION 'activate_reset: refused: the staged catch-up does not end at the activation barrier' USING ERRCODE = 'SY400';
  END IF;

  -- The candidate slot: permanent, logical, ours, with no gap through the barrier.
  SELECT s.* INTO slot FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = r.candidate_slot;
  IF NOT FOUND OR slot.slot_type <> 'logical' OR slot.temporary OR slot.database IS DISTINCT FROM r.database_name
     OR slot.plugin IS DISTINCT FROM r.plugin OR slot.wal_status = 'lost'
     OR slot.confirmed_flush_lsn IS DISTINCT FROM r.activation_barrier THEN
    RAISE EXCEPTION 'activate_reset: refused: the candidate slot is missing or not at the activation barrier'
      USING ERRCODE = 'SY400';
  END IF;

  -- What activates is what was verified (synchro.runner_reset_ready).
  IF r.row_digest IS NULL OR r.row_digest IS DISTINCT FROM synchro._reset_digest('synchro_reset', 'rows')
     OR r.scope_digest IS DISTINCT FROM synchro._reset_digest('synchro_reset', 'scopes') THEN
    RAISE EXCEPTION 'activate_reset: refused: the staged state differs from the verified one' USING ERRCODE = 'SY400';
  END IF;

  -- Every accepted push fence through the barrier is covered: visible in the baseline
  -- snapshot (a reset_baseline record) or WAL-materialized by the catch-up. A fence is
  -- through the barrier when its push's top-level transaction (txid) is visible in
  -- barrier_snapshot. Not its row's xmin: a push writes each fence inside a savepoint,
  -- so xmin is a subtransaction id, which the snapshot's xip list never names; one of a
  -- push still open at the marker looked committed, and its fence, written after the
  -- barrier, refused the reset (TestResetEdgePushInFlightAcrossMarker). Rows from
  -- before migration 00003 have no txid; none of them can be open now.
  SELECT count(*) INTO n FROM synchro.write_fence f
   WHERE pg_visible_in_snapshot(coalesce(f.txid,
                                         synchro._full_xid(f.xmin::text::bigint, pg_snapshot_xmax(r.barrier_snapshot)::text::numeric)),
                                r.barrier_snapshot)
     AND NOT EXISTS (SELECT 1 FROM synchro.reset_baseline b WHERE b.reset_id = r.reset_id AND b.fence_id = f.fence_id)
     AND NOT EXISTS (SELECT 1 FROM synchro.event e WHERE e.stream_generation = r.target_generation AND e.fence_id = f.fence_id);
  IF n > 0 THEN
    RAISE EXCEPTION 'activate_reset: refused: % push fences through the barrier are not covered', n USING ERRCODE = 'SY400';
  END IF;

  -- A view on a table about to be set aside would follow it into synchro_retired.
  IF EXISTS (SELECT 1 FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
              WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
                AND d.refobjid IN ('synchro.projection'::regclass, 'synchro.rule_value'::regclass,
                                   'synchro.membership'::regclass)
                AND w.ev_class NOT IN ('synchro.projection'::regclass, 'synchro.rule_value'::regclass,
                                       'synchro.membership'::regclass)) THEN
    RAISE EXCEPTION 'activate_reset: refused: a view depends on the projected-state tables' USING ERRCODE = 'SY400';
  END IF;

  -- Install: the live projections step aside (kept until cleanup), the stage moves in.
  -- The retired tables of an earlier reset, if its cleanup has not run, go now.
  PERFORM synchro._reset_drop_tables('synchro_retired');
  LOCK TABLE synchro.membership, synchro.projection, synchro.rule_value IN ACCESS EXCLUSIVE MODE;
  FOREACH t IN ARRAY ARRAY['projection', 'rule_value', 'membership'] LOOP
    EXECUTE format('ALTER TABLE synchro.%I SET SCHEMA synchro_retired', t);
    EXECUTE format('ALTER TABLE synchro_reset.%I SET SCHEMA synchro', t);
  END LOOP;
  DROP TABLE synchro_reset.progress;

  -- The new stream generation and the durable active-slot pointer.
  UPDATE synchro.stream_generation g SET state = 'retired' WHERE g.stream_generation = r.source_generation;
  INSERT INTO synchro.stream_generation (stream_generation, slot_name, plugin, database_name, generation_start_lsn, state)
  -- One byte before the barrier's end: a commit record that starts right at it is the
  -- new generation's first (synchro.runner_baseline says why).
  VALUES (r.target_generation, r.candidate_slot, r.plugin, r.database_name, r.activation_barrier - 1, 'active');
  UPDATE synchro.progress
     SET stream_generation = r.target_generation, generation_start_lsn = r.activation_barrier - 1,
         materialized_commit_lsn = NULL, processed_end_lsn = r.activation_barrier, acknowledged_end_lsn = r.activation_barrier,
         registry_generation = sp.registry_generation, updated_at = now();
  -- No pre-activation catch-up effect is exposed: the baseline through the barrier is
  -- generation_start, delivered by rebuild. The replay identities stay.
  DELETE FROM synchro.effect e WHERE e.stream_generation = r.target_generation;
  -- Likewise the consumer groups' change record of the catch-up: the new generation's
  -- changes start after the barrier (groups of the old generation read SY409).
  DELETE FROM synchro.change c WHERE c.stream_generation = r.target_generation;

  -- Coverage now counts: the reset_baseline records, and the fences the catch-up
  -- materialized (held back from coverage until now).
  UPDATE synchro.write_fence f SET coverage = 'baseline', covered_at = now()
   WHERE f.coverage IS NULL
     AND f.fence_id IN (SELECT b.fence_id FROM synchro.reset_baseline b WHERE b.reset_id = r.reset_id);
  UPDATE synchro.write_fence f SET coverage = 'wal', covered_at = now()
   WHERE f.coverage IS NULL
     AND f.fence_id IN (SELECT e.fence_id FROM synchro.event e WHERE e.stream_generation = r.target_generation);

  -- The old stream's blocking poison is recovered by this reset (ADR 001, path 2).
  UPDATE synchro.quarantine q SET resolved_at = now(), retry_requested = false
   WHERE q.stream_generation = r.source_generation AND q.resolved_at IS NULL;
  -- Projection bootstraps the old stream did not merge (docs/bootstrap.md): the
  -- reset's baseline was read under a snapshot taken after their activation committed
  -- (activate_registry refuses while a reset is open), so it holds their rows in their
  -- registered shape, and reset_baseline covers their pushes. Their stages go; the
  -- advisory lock waits for a stage the runner is committing right now.
  PERFORM pg_advisory_xact_lock(hashtextextended('synchro.bootstrap', synchro._lock_seed()));
  DELETE FROM synchro.bootstrap_row s USING synchro.bootstrap b
   WHERE b.generation = s.generation AND b.relation_id = s.relation_id
     AND b.merged_at IS NULL AND b.stream_generation = r.source_generation;
  UPDATE synchro.bootstrap b SET phase = 'subsumed', detail = 'subsumed by stream reset'
   WHERE b.merged_at IS NULL AND b.phase NOT IN ('merged', 'subsumed') AND b.stream_generation = r.source_generation;
  -- The runner reads the new slot from here on (readiness compares the two).
  UPDATE synchro.runner SET slot_name = r.candidate_slot;
  UPDATE synchro.reset x SET phase = 'activated', ended_at = now() WHERE x.reset_id = r.reset_id;
END
$$;

REVOKE ALL ON FUNCTION synchro.activate_reset(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.activate_reset(uuid) TO synchro_operator;

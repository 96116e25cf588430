-- Takes, for synchro.activate_registry, the lock of every table the activation alters,
-- all at once or none: SHARE ROW EXCLUSIVE on the registered tables of generation g
-- (CREATE OR REPLACE TRIGGER, ENABLE TRIGGER), ACCESS EXCLUSIVE on those leaving the
-- registry (DROP TRIGGER), in relation_id order. Taken one table at a time as each
-- trigger was installed, activation held one table's lock while it waited for another's,
-- and an application transaction writing the two tables in the other order deadlocked
-- with it (40P01 to one side; TestOperateEdgeReadinessDuringBootstrap under load), with
-- every writer of the first table queued meanwhile. Here each attempt waits at most
-- 100 ms for a lock (below deadlock_timeout: no cycle is ever detected); a refused
-- attempt releases what it took (its subtransaction ends) and lets the writers through,
-- then the next one tries after a growing, jittered pause. It tries until it has them
-- all, as the single-table waits did, bounded only by the caller's statement_timeout,
-- or by the caller's lock_timeout, when set, for the whole acquisition (55P03). A
-- deadlock reported to this side (40P01: a server whose deadlock_timeout is below the
-- 100 ms wait runs the detector here first) is retried the same way: the attempt's locks
-- are gone with its subtransaction, so the writer on the other side proceeds.
CREATE OR REPLACE FUNCTION synchro._activation_lock_tables(g bigint, prev bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r record;
  tries int := 0;
  caller text := current_setting('lock_timeout');
  deadline timestamptz;
BEGIN
  IF caller NOT IN ('0', '0ms', '0s') THEN
    deadline := clock_timestamp() + caller::interval;
  END IF;
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '100ms', true);
      -- The active generation's row first, which the activation updates at its end: a
      -- REPEATABLE READ push holds it FOR SHARE to its transaction's end
      -- (synchro._push_prepare). Waited for here, under the same bound, the activation
      -- holds no table's lock meanwhile: waited for at its update, with every
      -- registered table locked, one idle transaction that had pushed stopped every
      -- writer of every registered table, and deadlocked when it wrote one
      -- (TestActivationWaitsForRepeatableReadPushWithoutBlockingWriters, found by
      -- review 2026-12-05).
      PERFORM 1 FROM synchro.registry_generation rg WHERE rg.generation = prev FOR UPDATE;
      FOR r IN
        SELECT rel.relid, q.generation IS NULL AS leaving
          FROM synchro.relation rel
          LEFT JOIN synchro.registration q ON q.relation_id = rel.relation_id AND q.generation = g
         WHERE q.generation IS NOT NULL
            OR EXISTS (SELECT 1 FROM synchro.registration p WHERE p.relation_id = rel.relation_id AND p.generation = prev)
         ORDER BY rel.relation_id
      LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = r.relid);
        IF r.leaving THEN
          EXECUTE format('LOCK TABLE ONLY %s IN ACCESS EXCLUSIVE MODE', r.relid::regclass);
        ELSE
          EXECUTE format('LOCK TABLE ONLY %s IN SHARE ROW EXCLUSIVE MODE', r.relid::regclass);
        END IF;
      END LOOP;
      -- The caller's lock_timeout again for the rest of the activation (set_config's
      -- local value would otherwise last to the end of its transaction).
      PERFORM set_config('lock_timeout', caller, true);
      RETURN;
    EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
      -- The subtransaction's locks and its lock_timeout are gone with it.
      NULL;
    END;
    tries := tries + 1;
    IF deadline IS NOT NULL AND clock_timestamp() >= deadline THEN
      RAISE EXCEPTION 'activation could not lock the registered tables within lock_timeout (% attempts)', tries
        USING ERRCODE = 'lock_not_available';
    END IF;
    PERFORM pg_sleep(least(1.0, 0.01 * 2 ^ least(tries, 7)) * (0.5 + random()));
  END LOOP;
END
$$;

REVOKE ALL ON FUNCTION synchro._activation_lock_tables(bigint, bigint) FROM PUBLIC;

-- Makes this session plan its statements again when one of the tables materialization
-- probes has grown past the size its cached plans were made for (called by
-- synchro.materialize_batch before a batch's work, which those plans see none of).
--
-- A cached plan is made for the sizes the tables had then and is not made again because
-- a table grew: a probe planned as a sequential scan of a nearly empty table (where that
-- is the cheaper probe) then scans all of it once per row. After autovacuum had analyzed
-- the tables nearly empty, a backlog of 8,000 one-row transactions read 64 million tuples
-- of synchro.rule_value and took 7.4 s instead of 2.8 s (TestMaterializePlansFollowGrowth).
-- Statistics need not be fresh for this: the planner scales them to a table's current
-- size in pages, so planning again is enough (DISCARD PLANS; plans in use run on).
--
-- When: a table that held fewer than 64 blocks (about 5,000 rows) when the session last
-- planned, now at least 8 blocks and four times that size. A plan made for 64 blocks or
-- more probes by index whatever the table's later growth, so a session plans again a few
-- times while its tables are young and then never. Growth counts whoever wrote the rows
-- (this session, others, earlier ones). The sizes of the last planning are kept in a
-- setting of the session (set_config, not local: it outlives the transaction, and a
-- rolled-back one takes its update back); a value that is not the pack's own shape, which
-- the runner's session could set, counts as "never planned": the sizes are recorded and
-- nothing is discarded, so at worst it delays one planning. The first call of a session
-- records the sizes its plans are made for.
--
-- The sizes are looked at for a batch of 64 source transactions or more, and otherwise
-- once every 64 calls: nine relation sizes cost about 13 µs (with a lock on each), a
-- share of a one-transaction batch that the tables' growth over 64 such batches does
-- not justify. The count of calls is a setting of the session too; a value that is not
-- a plain number means "look now".
CREATE OR REPLACE FUNCTION synchro._replan_if_grown(txns int) RETURNS void
LANGUAGE plpgsql
-- No SET clause: an internal helper, called only from synchro.materialize_batch, which
-- pinned search_path.
AS $$
DECLARE
  now_blocks bigint[];
  planned    text := pg_catalog.current_setting('synchro.session_plan_blocks', true);
  was        bigint[];
  calls      text := pg_catalog.current_setting('synchro.session_plan_calls', true);
BEGIN
  IF txns < 64 AND calls ~ '^[0-9]{1,2}$' AND calls::int < 63 THEN
    PERFORM pg_catalog.set_config('synchro.session_plan_calls', (calls::int + 1)::text, false);
    RETURN;
  END IF;
  PERFORM pg_catalog.set_config('synchro.session_plan_calls', '0', false);
  SELECT array_agg(pg_catalog.pg_relation_size(u.rel) / 8192 ORDER BY u.o) INTO now_blocks
    FROM unnest(ARRAY['synchro.txn', 'synchro.event', 'synchro.projection', 'synchro.membership',
                      'synchro.rule_value', 'synchro.effect', 'synchro.change', 'synchro.row_version',
                      'synchro.write_fence']::regclass[]) WITH ORDINALITY AS u(rel, o);
  IF planned ~ '^\{[0-9]{1,15}(,[0-9]{1,15}){8}\}$' THEN
    was := planned::bigint[];
    IF NOT EXISTS (SELECT 1 FROM unnest(now_blocks, was) AS g(b, p) WHERE g.p < 64 AND g.b >= 8 AND g.b >= 4 * g.p) THEN
      RETURN;
    END IF;
    DISCARD PLANS;
  END IF;
  PERFORM pg_catalog.set_config('synchro.session_plan_blocks', now_blocks::text, false);
END
$$;

REVOKE ALL ON FUNCTION synchro._replan_if_grown(int) FROM PUBLIC;

-- Whether planning a query on relation rel may run the application's code: a
-- function or operator in one of its index expressions, index predicates or
-- statistics expressions that neither a superuser nor the pack owner (current_user,
-- in the pack's SECURITY DEFINER functions) owns. The planner folds every IMMUTABLE
-- function whose arguments are constants (eval_const_expressions) in those
-- expressions when it loads them, statistics expressions at every planning, so a
-- query the pack owner plans on an application table ran the table owner's
-- function with the pack owner's rights (CREATE STATISTICS s ON (body || app.f())
-- FROM app.t, app.f copying synchro.server_key; found by an independent review,
-- 2026-12-04). Callers (the fence's full check, activation, the baselines) refuse
-- such a relation (0A000) before they plan a query on it; a function the
-- application needs there can be handed to a superuser or the pack owner (ALTER
-- FUNCTION … OWNER TO), who then vouches for it. CHECK constraints are folded only
-- under constraint_exclusion = on: the callers pin it to partition instead.
--
-- Two index probes when the relation has no such expression (the common case);
-- pg_depend then only for those that do: index_create and CreateStatistics record
-- a dependency on every function and operator their expressions name.
CREATE OR REPLACE FUNCTION synchro._planned_app_code(rel oid) RETURNS boolean
LANGUAGE sql STABLE
-- No SET clause: called only from functions that pinned search_path (and every name
-- is qualified).
AS $$
  SELECT (EXISTS (SELECT 1 FROM pg_catalog.pg_index i
                   WHERE i.indrelid = rel AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL))
          OR EXISTS (SELECT 1 FROM pg_catalog.pg_statistic_ext s
                      WHERE s.stxrelid = rel AND s.stxexprs IS NOT NULL))
     AND EXISTS (
       SELECT 1
         FROM pg_catalog.pg_depend d
         LEFT JOIN pg_catalog.pg_operator o
           ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = d.refobjid
         JOIN pg_catalog.pg_proc p
           ON p.oid = CASE WHEN d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass THEN d.refobjid
                           ELSE o.oprcode::pg_catalog.oid END
         JOIN pg_catalog.pg_roles ow ON ow.oid = p.proowner
        WHERE ((d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND d.objid IN (SELECT i.indexrelid FROM pg_catalog.pg_index i WHERE i.indrelid = rel))
               OR (d.classid = 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass
                   AND d.objid IN (SELECT s.oid FROM pg_catalog.pg_statistic_ext s WHERE s.stxrelid = rel)))
          AND d.refclassid IN ('pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_operator'::pg_catalog.regclass)
          AND NOT ow.rolsuper
          AND ow.rolname OPERATOR(pg_catalog.<>) CURRENT_USER)
$$;

REVOKE ALL ON FUNCTION synchro._planned_app_code(oid) FROM PUBLIC;

-- Operator: compaction to the end, one committed transaction per batch
-- (docs/sql/compact.md). CALL synchro.compact_all('1 hour') calls synchro.compact
-- until it reports "done", committing after each call, so a long compaction never
-- holds one transaction, its snapshot or its locks; report sums what every batch
-- removed. Run it outside a transaction block (a CALL inside BEGIN cannot commit).
--
-- A procedure that commits may be neither SECURITY DEFINER nor carry a SET clause, so
-- this one runs with the caller's rights and search_path: it only calls
-- synchro.compact (SECURITY DEFINER, pinned), and every operator below is qualified,
-- so nothing of the caller's search_path resolves here.
CREATE OR REPLACE PROCEDURE synchro.compact_all(keep interval, INOUT report jsonb DEFAULT NULL)
LANGUAGE plpgsql
AS $$
DECLARE
  r     pg_catalog.jsonb;
  total pg_catalog.jsonb := '{}';
  k     pg_catalog.text;
  calls pg_catalog.int8 := 0;
BEGIN
  LOOP
    r := synchro.compact(keep);
    calls := calls OPERATOR(pg_catalog.+) 1;
    FOR k IN SELECT e.key FROM pg_catalog.jsonb_each(r) e WHERE e.key OPERATOR(pg_catalog.~~) E'deleted\\_%' LOOP
      total := total OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(k,
        COALESCE((total OPERATOR(pg_catalog.->>) k)::pg_catalog.int8, 0)
          OPERATOR(pg_catalog.+) (r OPERATOR(pg_catalog.->>) k)::pg_catalog.int8);
    END LOOP;
    COMMIT;
    EXIT WHEN (r OPERATOR(pg_catalog.->>) 'done')::pg_catalog.bool;
  END LOOP;
  report := total OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_object(
    'batches', calls, 'horizon', r OPERATOR(pg_catalog.->) 'horizon', 'done', true);
END
$$;

REVOKE ALL ON PROCEDURE synchro.compact_all(interval, jsonb) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE synchro.compact_all(interval, jsonb) TO synchro_operator;

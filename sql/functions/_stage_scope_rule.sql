-- Stages one scope rule in the pending generation. Both add_scope_rule forms call it, so
-- direct and `via` rules share one set of checks. Checks repeat at activation.
CREATE OR REPLACE FUNCTION synchro._stage_scope_rule(
  table_id text, scope_prefix text, column_name name,
  via regclass, via_match name, via_scope name)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  g bigint := synchro._pending_generation();
  rid bigint;
  via_rid bigint;
  n int;
BEGIN
  IF scope_prefix IS NULL OR length(scope_prefix) NOT BETWEEN 1 AND 200 OR scope_prefix ~ '[[:cntrl:]]' THEN
    RAISE EXCEPTION 'scope rule refused: scope_prefix must be 1 to 200 printable characters' USING ERRCODE = 'SY400';
  END IF;
  SELECT r.relation_id INTO rid
    FROM synchro.relation r JOIN synchro.registration reg ON reg.relation_id = r.relation_id AND reg.generation = g
   WHERE r.table_id = _stage_scope_rule.table_id AND r.registration_kind = 'synced';
  IF NOT FOUND THEN
    RAISE EXCEPTION 'scope rule refused: unknown table_id' USING ERRCODE = 'SY400';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM synchro.registration reg
                  WHERE reg.generation = g AND reg.relation_id = rid AND column_name = ANY (reg.columns)) THEN
    RAISE EXCEPTION 'scope rule refused: column_name must be a registered column of the table' USING ERRCODE = 'SY400';
  END IF;
  IF via IS NOT NULL THEN
    SELECT r.relation_id INTO via_rid
      FROM synchro.relation r JOIN synchro.registration reg ON reg.relation_id = r.relation_id AND reg.generation = g
     WHERE r.relid = via AND r.registration_kind = 'capture_dependency';
    IF NOT FOUND THEN
      RAISE EXCEPTION 'scope rule refused: via must be a registered dependency' USING ERRCODE = 'SY400';
    END IF;
    IF via_match IS NULL OR via_scope IS NULL OR NOT EXISTS (
        SELECT 1 FROM synchro.registration reg
         WHERE reg.generation = g AND reg.relation_id = via_rid
           AND via_match = ANY (reg.columns) AND via_scope = ANY (reg.columns)) THEN
      RAISE EXCEPTION 'scope rule refused: via_match and via_scope must be registered columns of the dependency' USING ERRCODE = 'SY400';
    END IF;
    -- The match compares the two columns' rendered values (_via_match_comparable says
    -- which types and collations agree with SQL equality).
    IF NOT synchro._via_match_comparable((SELECT r.relid FROM synchro.relation r WHERE r.relation_id = rid),
                                         column_name, via::oid, via_match) THEN
      RAISE EXCEPTION 'scope rule refused: column_name and via_match must be of one type whose text is its equality (text or varchar under a deterministic collation, an integer type, uuid, boolean, date, timestamp, timestamptz or bytea)'
        USING ERRCODE = 'SY400';
    END IF;
  END IF;
  IF EXISTS (SELECT 1 FROM synchro.scope_rule s
              WHERE s.generation = g AND s.relation_id = rid AND s.scope_prefix = _stage_scope_rule.scope_prefix
                AND s.column_name = _stage_scope_rule.column_name
                AND s.via_relation_id IS NOT DISTINCT FROM via_rid
                AND s.via_match IS NOT DISTINCT FROM _stage_scope_rule.via_match
                AND s.via_scope IS NOT DISTINCT FROM _stage_scope_rule.via_scope) THEN
    RAISE EXCEPTION 'scope rule refused: the same rule exists already' USING ERRCODE = 'SY400';
  END IF;
  SELECT coalesce(max(s.rule_no), 0) + 1 INTO n FROM synchro.scope_rule s WHERE s.generation = g AND s.relation_id = rid;
  INSERT INTO synchro.scope_rule (generation, relation_id, rule_no, scope_prefix, column_name,
                                  via_relation_id, via_match, via_scope)
  VALUES (g, rid, n, scope_prefix, column_name, via_rid,
          CASE WHEN via IS NULL THEN NULL ELSE via_match END,
          CASE WHEN via IS NULL THEN NULL ELSE via_scope END);
END
$$;

REVOKE ALL ON FUNCTION synchro._stage_scope_rule(text, text, name, regclass, name, name) FROM PUBLIC;

-- The active registry: one row per registration of the active generation, with its
-- scope rules. Operators read it; applications read nothing of the registry.
CREATE OR REPLACE VIEW synchro.registry AS
SELECT g.generation,
       rel.relation_id,
       rel.table_id,
       rel.registration_kind,
       rel.schema_name,
       rel.table_name,
       rel.key_column,
       rel.key_type,
       reg.columns,
       coalesce((
         SELECT jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                  'scope_prefix', s.scope_prefix,
                  'column_name', s.column_name,
                  'via', CASE WHEN s.via_relation_id IS NULL THEN NULL
                              ELSE (SELECT format('%I.%I', v.schema_name, v.table_name)
                                      FROM synchro.relation v WHERE v.relation_id = s.via_relation_id) END,
                  'via_match', s.via_match,
                  'via_scope', s.via_scope)) ORDER BY s.rule_no)
           FROM synchro.scope_rule s
          WHERE s.generation = g.generation AND s.relation_id = rel.relation_id), '[]'::jsonb) AS scope_rules
  FROM synchro.registry_generation g
  JOIN synchro.registration reg ON reg.generation = g.generation
  JOIN synchro.relation rel ON rel.relation_id = reg.relation_id
 WHERE g.state = 'active';

REVOKE ALL ON synchro.registry FROM PUBLIC;
GRANT SELECT ON synchro.registry TO synchro_operator;

-- A short, value-free reason for a rejected mutation: the condition name of its
-- SQLSTATE and, when PostgreSQL names one, the constraint or column (identifiers
-- chosen by the schema's author, never row data). Message texts are never used: they
-- can carry values.
CREATE OR REPLACE FUNCTION synchro._reject_reason(code text, constraint_name text, column_name text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
  SELECT left(
    CASE code
      WHEN '23505' THEN 'unique_violation'
      WHEN '23503' THEN 'foreign_key_violation'
      WHEN '23502' THEN 'not_null_violation'
      WHEN '23514' THEN 'check_violation'
      WHEN '23P01' THEN 'exclusion_violation'
      WHEN '23001' THEN 'restrict_violation'
      WHEN '42501' THEN 'insufficient_privilege'
      WHEN 'P0001' THEN 'raise_exception'
      WHEN '22P02' THEN 'invalid_text_representation'
      WHEN '22003' THEN 'numeric_value_out_of_range'
      WHEN '22001' THEN 'string_data_right_truncation'
      WHEN '22007' THEN 'invalid_datetime_format'
      WHEN '22008' THEN 'datetime_field_overflow'
      WHEN '22012' THEN 'division_by_zero'
      WHEN '22023' THEN 'invalid_parameter_value'
      WHEN '22004' THEN 'null_value_not_allowed'
      ELSE CASE left(code, 2) WHEN '22' THEN 'data_exception' ELSE 'integrity_constraint_violation' END
    END
    || CASE WHEN nullif(constraint_name, '') IS NOT NULL THEN ' (constraint ' || constraint_name || ')'
            WHEN nullif(column_name, '') IS NOT NULL THEN ' (column ' || column_name || ')'
            ELSE '' END,
    200)
$$;

REVOKE ALL ON FUNCTION synchro._reject_reason(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._reject_reason(text, text, text) TO synchro_app;

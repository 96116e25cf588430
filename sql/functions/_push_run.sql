-- synchro._push_run: synchro.push's body (push is a one-statement SQL wrapper that
-- passes the caller's search_path). Applies a client's mutations in one transaction with
-- compare-and-swap on opaque row versions, idempotent by mutation id (CONTRACT.md
-- "Push").
--
-- SECURITY INVOKER on purpose: the row writes run with the caller's own privileges and
-- row-level security. Registry reads, reservation locks and outcome records go through
-- SECURITY DEFINER helpers, which refuse any caller but this function
-- (synchro._called_from_push, docs/security.md); a reservation is locked, and its version
-- read, only after this function read the row as the caller. Nothing else of the pack
-- runs here: row images and reject reasons are computed inline, so synchro_app executes
-- nothing but the contract's functions and these helpers.
--
-- search_path. This function's own code is compiled, planned and run with search_path
-- pinned to pg_catalog, pg_temp: a caller's operator, type or (inlined SQL) function must
-- never be evaluated in this function's own frame, where it could call a helper as if it
-- were this function. Only the statements on the caller's table (EXECUTE: its reads and
-- writes, where its triggers, defaults and policies run) get the caller's search_path
-- back, for exactly that statement; they run through SPI, so whatever they call is never
-- this function's frame. An exception inside a mutation's block rolls the setting back
-- with the block.
--
-- Each mutation runs in its own savepoint (the BEGIN ... EXCEPTION block), so a conflict
-- or a rejection does not undo the others; every failure that is not the mutation's own
-- fault is re-raised and fails the whole call. Pull visibility is not touched here: the
-- fence trigger emits the WAL message, and only WAL materialization makes the write
-- visible to pull.
CREATE OR REPLACE FUNCTION synchro._push_run(client_id text, mutations jsonb, caller_search_path text) RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
-- Row images render the same whatever the caller's session settings.
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
SET bytea_output TO 'hex'
SET xmloption TO 'content'
AS $$
DECLARE
  plan     jsonb;
  m        jsonb;
  results  jsonb[] := '{}';
  outcome  jsonb;
  cur      jsonb;
  written  jsonb;
  ent      record;
  ver      text;
  cols     name[];
  col_list text;
  tgt      text;
  keypred  text;
  st       text;
  con      text;
  colname  text;
  reason   text;
  deferred_list text;
  stmt     text;
  key_text text;
  row_in   jsonb;
  visible  boolean;
  -- The column definition list of a mutation's row for jsonb_to_record: the columns it
  -- names, typed as the table declares them (format_type qualifies a type outside
  -- pg_catalog under the pinned path). Only these columns are built: jsonb_populate_record
  -- over the table's row type built every column, and one the row left out whose domain
  -- is NOT NULL failed the write (23502) that plain SQL accepted
  -- (TestPushNotNullDomainColumn).
  col_defs text;
  n_written bigint;
  con_schema text;     -- the schema and table of a unique violation's constraint
  con_table  text;
  err_where  text;     -- a failure's context: who raised it (the pack, or the application)
BEGIN
  plan := synchro._push_prepare(client_id, mutations);
  -- Deferred constraints are checked at the end of each statement from here on, so a
  -- failure lands on the mutation that caused it.
  SET CONSTRAINTS ALL IMMEDIATE;

  FOR m IN SELECT value FROM jsonb_array_elements(plan) LOOP
    IF m ? 'outcome' THEN
      -- Decided before with the same content: the recorded outcome, nothing written.
      results := results || (m -> 'outcome');
      CONTINUE;
    END IF;
    cols := ARRAY(SELECT jsonb_array_elements_text(m -> 'columns'))::name[];
    tgt := format('%I.%I', m ->> 'schema', m ->> 'table');
    keypred := format('t.%I OPERATOR(pg_catalog.=) $1::pg_catalog.%s', m ->> 'key_column', m ->> 'key_pg_type');
    -- The statements on the caller's table get only plain variables (their text and
    -- parameters are computed here, under the pinned search_path).
    key_text := m ->> 'key';
    row_in := m -> 'row';
    -- The columns an insert or an update writes, and their definitions for
    -- jsonb_to_record (col_defs, above).
    col_list := NULL;
    col_defs := NULL;
    IF m ->> 'op' <> 'delete' THEN
      SELECT string_agg(format('%I', k), ', ') INTO col_list FROM jsonb_object_keys(row_in) k;
      SELECT string_agg(format('%I %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ') INTO col_defs
        FROM jsonb_object_keys(row_in) k
        JOIN pg_attribute a ON a.attrelid = tgt::regclass AND a.attname = k AND a.attnum > 0 AND NOT a.attisdropped;
    END IF;
    BEGIN
      -- A key over 1024 bytes (octet_length of its text; docs/errors.md) is the fence
      -- trigger's refusal too. Checked here first, so an oversized key never reaches an
      -- index (a btree entry is at most about 2.7 kB: 54000 would fail the whole call
      -- and a client would send that mutation for ever): just this mutation is
      -- rejected, as a data exception, and its outcome recorded like any other.
      IF pg_catalog.octet_length(key_text) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'push: the key is longer than 1024 bytes'
          USING ERRCODE = 'string_data_right_truncation', COLUMN = m ->> 'key_column';
      END IF;
      -- A varchar(n) key longer than n: PostgreSQL refuses it (22001), unless what is
      -- past n is spaces, which it drops: the row would be stored under another key than
      -- the mutation's, and the call failed whole for want of that key's write fence
      -- (55000), every retry alike (TestPushVarcharKeyTrailingSpaces). Refused either way.
      IF m ->> 'key_pg_type' = 'varchar' AND EXISTS (
           SELECT 1 FROM pg_attribute a
            WHERE a.attrelid = tgt::regclass AND a.attname = m ->> 'key_column'
              AND a.atttypmod > 4 AND pg_catalog.char_length(key_text) > a.atttypmod - 4) THEN
        RAISE EXCEPTION 'push: the key is longer than its varchar column'
          USING ERRCODE = 'string_data_right_truncation', COLUMN = m ->> 'key_column';
      END IF;
      -- The row is read as the caller (its privileges and row-level security) before
      -- its reservation is locked or its version read: a row the caller cannot read
      -- gets neither. Update and delete lock the source row first, then the
      -- reservation: the order a direct write takes them (row, then fence), so the two
      -- never deadlock each other.
      IF m ->> 'op' <> 'insert' THEN
        stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s FOR UPDATE', tgt, keypred);
        PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
        EXECUTE stmt INTO cur USING key_text;
        IF cur IS NULL THEN
          -- Under READ COMMITTED a row lock that waited for a transaction which deleted
          -- the row and inserted its key again finds the old tuple gone, and the new
          -- one is not in the statement's snapshot: the row looked absent, and the
          -- conflict said so (null version and row) while the row existed
          -- (TestPushUpdateRacesDeleteAndInsert). A new statement sees it.
          EXECUTE stmt INTO cur USING key_text;
        END IF;
        IF cur IS NULL THEN
          -- FOR UPDATE also applies the UPDATE policies of row-level security: a row the
          -- caller may read but not lock that way is not absent, it is refused
          -- (TestPushRowVisibleButNotUpdatable; it was answered as absent).
          -- Only where row-level security applies to the caller: without it a row that
          -- two FOR UPDATE reads missed was deleted and inserted again meanwhile, by
          -- transactions that keep doing so, and stays a conflict (the chaos test caught
          -- a 42501 for legal data when this asked nothing more).
          EXECUTE format('SELECT true FROM ONLY %s t WHERE %s', tgt, keypred) INTO visible USING key_text;
          IF visible AND pg_catalog.row_security_active(tgt::pg_catalog.regclass) THEN
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            RAISE EXCEPTION 'row-level security: the row is visible but may not be locked for this write'
              USING ERRCODE = 'insufficient_privilege';
          END IF;
        END IF;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      ELSE
        -- An insert locks no source row (it needs no UPDATE privilege).
        stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s', tgt, keypred);
        PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
        EXECUTE stmt INTO cur USING key_text;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
      END IF;
      IF cur IS NOT NULL THEN
        ent := synchro._push_enter(client_id, (m ->> 'id')::uuid, (m ->> 'relation_id')::bigint, m ->> 'key', true);
        IF m ->> 'op' = 'insert' THEN
          -- Read the row again once the reservation is locked: a direct write holds that
          -- lock until it commits, so the row read now is the row of the version in ent.
          stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s', tgt, keypred);
          PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
          EXECUTE stmt INTO cur USING key_text;
          PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        END IF;
      ELSE
        -- Absent (or hidden) to this caller: the push context only, no lock, no version.
        ent := synchro._push_enter(client_id, (m ->> 'id')::uuid, (m ->> 'relation_id')::bigint, m ->> 'key', false);
      END IF;
      written := NULL;
      outcome := NULL;

      IF m ->> 'op' = 'insert' THEN
        IF cur IS NOT NULL THEN
          outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
                                        'version', ent.version, 'row', (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
                                          FROM jsonb_each(cur) e WHERE e.key = ANY (cols::text[])));
        ELSE
          -- A plain INSERT, as the application's own: no ON CONFLICT and no RETURNING,
          -- which both apply the SELECT policies to the new row (a row the caller may
          -- insert but not read back was rejected 42501), and a key that exists fails
          -- it, so whatever its BEFORE INSERT triggers wrote for the proposed row is
          -- undone with this block (it stayed behind a conflict). Review 2026-12-05.
          stmt := format(
            'INSERT INTO %s AS t (%s) SELECT %s FROM pg_catalog.jsonb_to_record($1) AS x(%s)',
            tgt, col_list, col_list, col_defs);
          BEGIN
            PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
            EXECUTE stmt USING row_in;
            GET DIAGNOSTICS n_written = ROW_COUNT;
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            IF n_written = 0 THEN
              -- A BEFORE INSERT trigger skipped the row (returned NULL): nothing was
              -- written; undo what the triggers did and answer as before (conflict).
              RAISE EXCEPTION 'push: the proposed row was skipped' USING ERRCODE = 'SYC00';
            END IF;
            written := '{}'::jsonb;
          EXCEPTION WHEN SQLSTATE 'SYC00' THEN
            written := NULL;
          WHEN unique_violation THEN
            -- (The block's rollback restored the pinned search_path: what runs here is
            -- the pack's.) The key's own unique index on this very table (key columns
            -- only: a primary key may INCLUDE others), not a same-named constraint of
            -- another table an application trigger wrote (review 2026-12-05).
            GET STACKED DIAGNOSTICS con = CONSTRAINT_NAME, con_schema = SCHEMA_NAME, con_table = TABLE_NAME;
            IF NOT EXISTS (
                 SELECT 1 FROM pg_catalog.pg_index i
                   JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
                   JOIN pg_catalog.pg_class tc ON tc.oid = i.indrelid
                   JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace
                   JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                  WHERE i.indrelid = tgt::pg_catalog.regclass AND i.indisunique AND i.indnkeyatts = 1
                    AND i.indpred IS NULL AND ic.relname = con AND tc.relname = con_table AND tn.nspname = con_schema
                    AND a.attname = m ->> 'key_column') THEN
              RAISE; -- another unique constraint: this mutation's rejection
            END IF;
            IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
              -- At REPEATABLE READ or SERIALIZABLE the key may be a row this snapshot
              -- does not see (inserted concurrently: 40001, and the retry sees it) or
              -- one a policy hides from the caller (a conflict). ON CONFLICT tells the
              -- two apart as before this block, whatever the policies: the same insert
              -- with DO NOTHING, always rolled back, fails 40001 for a row outside the
              -- snapshot; any other way it ends leaves the conflict.
              BEGIN
                PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
                EXECUTE stmt || format(' ON CONFLICT (%I) DO NOTHING', m ->> 'key_column') USING row_in;
                RAISE EXCEPTION 'push: probe' USING ERRCODE = 'SYC01';
              EXCEPTION WHEN serialization_failure THEN
                RAISE EXCEPTION 'push: the key of mutation % was inserted by a transaction this snapshot does not see', m ->> 'id'
                  USING ERRCODE = 'serialization_failure';
              WHEN OTHERS THEN
                NULL;
              END;
            END IF;
            written := NULL;
          END;
          IF written IS NULL THEN
            -- The key exists after all (inserted concurrently, or hidden from this
            -- caller by row-level security): a conflict, with what the caller may see.
            -- Only a row it can read gets its reservation locked, then read again: the
            -- version and the row are those of one committed state.
            stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s', tgt, keypred);
            PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
            EXECUTE stmt INTO cur USING key_text;
            PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            IF cur IS NOT NULL THEN
              ent := synchro._push_enter(client_id, (m ->> 'id')::uuid, (m ->> 'relation_id')::bigint, m ->> 'key', true);
              stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s', tgt, keypred);
              PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
              EXECUTE stmt INTO cur USING key_text;
              PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
            END IF;
            outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
              'version', CASE WHEN cur IS NULL THEN NULL ELSE ent.version END,
              'row', CASE WHEN cur IS NULL THEN NULL ELSE (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
                                                             FROM jsonb_each(cur) e WHERE e.key = ANY (cols::text[])) END);
          END IF;
        END IF;
      ELSIF cur IS NULL THEN
        -- Update or delete of an absent row (or one this caller cannot see).
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict', 'version', NULL, 'row', NULL);
      ELSIF ent.version IS DISTINCT FROM m ->> 'base_version' OR ent.deleted THEN
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
                                      'version', ent.version, 'row', (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
                                        FROM jsonb_each(cur) e WHERE e.key = ANY (cols::text[])));
      ELSIF m ->> 'op' = 'update' THEN
        IF col_list IS NULL THEN
          -- An update that sets nothing still passes the fence: a new version.
          stmt := format('UPDATE ONLY %s AS t SET %I = t.%I WHERE %s RETURNING pg_catalog.to_jsonb(t.*)',
                         tgt, m ->> 'key_column', m ->> 'key_column', keypred);
          PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
          EXECUTE stmt INTO written USING key_text;
          PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        ELSE
          stmt := format(
            'UPDATE ONLY %s AS t SET (%s) = (SELECT %s FROM pg_catalog.jsonb_to_record($2) AS x(%s)) '
            'WHERE %s RETURNING pg_catalog.to_jsonb(t.*)', tgt, col_list, col_list,
            col_defs, keypred);
          PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
          EXECUTE stmt INTO written USING key_text, row_in;
          PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        END IF;
        IF written IS NULL THEN
          RAISE EXCEPTION 'row-level security hid the row from the update' USING ERRCODE = 'insufficient_privilege';
        END IF;
      ELSE
        stmt := format('DELETE FROM ONLY %s AS t WHERE %s RETURNING pg_catalog.jsonb_build_object()', tgt, keypred);
        PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
        EXECUTE stmt INTO written USING key_text;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        IF written IS NULL THEN
          RAISE EXCEPTION 'row-level security hid the row from the delete' USING ERRCODE = 'insufficient_privilege';
        END IF;
      END IF;

      ver := synchro._push_leave((m ->> 'relation_id')::bigint, m ->> 'key');
      IF outcome IS NULL AND m ->> 'op' <> 'delete' THEN
        -- The stored row of that version: RETURNING gave the row before AFTER triggers
        -- ran, and an application's AFTER trigger that changes the row again gives it
        -- another fence, whose version ver is (TestPushAcceptedRowIsTheStoredRow). This
        -- transaction holds the row and its reservation until it ends, so what is read
        -- now is that version's row. A row the caller cannot read back keeps RETURNING's.
        stmt := format('SELECT pg_catalog.to_jsonb(t.*) FROM ONLY %s t WHERE %s', tgt, keypred);
        PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
        EXECUTE stmt INTO cur USING key_text;
        PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
        written := coalesce(cur, written);
      END IF;
      IF outcome IS NULL THEN
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'accepted', 'version', ver);
        IF m ->> 'op' <> 'delete' THEN
          outcome := outcome || jsonb_build_object('row', (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}')
                                                             FROM jsonb_each(written) e WHERE e.key = ANY (cols::text[])));
        END IF;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, con = CONSTRAINT_NAME, colname = COLUMN_NAME;
      IF left(st, 2) IN ('22', '23') OR st IN ('42501', 'P0001') THEN
        -- A short, value-free reason: the condition name of the SQLSTATE and, when
        -- PostgreSQL names one, the constraint or column (identifiers chosen by the
        -- schema's author, never row data). Message texts are never used: they can
        -- carry values.
        reason := CASE st
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
          ELSE CASE left(st, 2) WHEN '22' THEN 'data_exception' ELSE 'integrity_constraint_violation' END
        END || CASE WHEN nullif(con, '') IS NOT NULL THEN ' (constraint ' || con || ')'
                    WHEN nullif(colname, '') IS NOT NULL THEN ' (column ' || colname || ')'
                    ELSE '' END;
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'rejected', 'code', st, 'reason', left(reason, 200));
      ELSIF left(st, 2) IN ('SY', '27', '0A', '40', '53', '54', '55', '57') THEN
        -- Not this mutation's fault (serialization, deadlock, timeout, fence order, an
        -- unsupported operation, the pack's refusals): the whole call fails with its
        -- SQLSTATE, nothing is written. Its message is kept only when the pack raised it
        -- (the failure's innermost frame is a function of schema synchro, which no
        -- caller can create functions in; any other name prints otherwise): those name
        -- no value and say what to do ("rename it back, or rebind it"). An application
        -- trigger may raise any of these codes with the row's values in its text
        -- (a "try later" 55000, an SY400 of its own; found by review 2026-12-05): its
        -- message, detail and hint are replaced by the condition's name
        -- (TestPushPassThroughErrorCarriesNoValue).
        GET STACKED DIAGNOSTICS err_where = PG_EXCEPTION_CONTEXT;
        IF pg_catalog.starts_with(pg_catalog.split_part(err_where, E'\n', 1), 'PL/pgSQL function synchro.') THEN
          RAISE;
        END IF;
        RAISE EXCEPTION 'push: the write of mutation % failed with SQLSTATE % (%)%',
          m ->> 'id', st,
          CASE st WHEN '40001' THEN 'serialization_failure' WHEN '40P01' THEN 'deadlock_detected'
                  WHEN '55P03' THEN 'lock_not_available' WHEN '57014' THEN 'query_canceled'
                  WHEN '0A000' THEN 'feature_not_supported' WHEN '27000' THEN 'triggered_data_change_violation'
                  WHEN '55000' THEN 'object_not_in_prerequisite_state' WHEN '55006' THEN 'object_in_use'
                  WHEN '53100' THEN 'disk_full' WHEN '53200' THEN 'out_of_memory' WHEN '53300' THEN 'too_many_connections'
                  WHEN '54001' THEN 'statement_too_complex' WHEN '57P01' THEN 'admin_shutdown'
                  ELSE 'class ' || left(st, 2) END,
          CASE WHEN left(st, 2) IN ('40', '57') OR st = '55P03'
               THEN ': the call wrote nothing; retry it'
               ELSE ': the call wrote nothing (the message is withheld: it may quote the row''s values)' END
          USING ERRCODE = st;
      ELSE
        -- Any other class fails the whole call too, with its SQLSTATE (CONTRACT.md), but
        -- not its message: a type's input function may quote the value it refused
        -- (tsquery's and tsvector's parsers raise 42601 with the input in the text,
        -- TestPushErrorNeverCarriesTheValue), and errors never carry row values.
        RAISE EXCEPTION 'push: the write of mutation % failed with SQLSTATE % (the message is withheld: it may quote the row''s values)',
          m ->> 'id', st USING ERRCODE = st;
      END IF;
    END;
    outcome := synchro._push_record(client_id, (m ->> 'id')::uuid, m ->> 'hash', outcome);
    results := results || outcome;
  END LOOP;
  -- SET CONSTRAINTS lasts for the transaction. A push is meant to be its own
  -- transaction; when a caller runs it inside a larger one, give the rest of that
  -- transaction the declared modes back: initially deferred constraints deferred again,
  -- those the caller can name. A constraint in a schema the caller may not use cannot
  -- be named by it (SET CONSTRAINTS would fail with 42501 and fail every push): it stays
  -- immediate for the rest of the transaction, which can only make that transaction
  -- check it earlier, never skip it.
  SELECT string_agg(DISTINCT format('%I.%I', n.nspname, c.conname), ', ') INTO deferred_list
    FROM pg_catalog.pg_constraint c JOIN pg_catalog.pg_namespace n ON n.oid = c.connamespace
   WHERE c.condeferrable AND c.condeferred
     AND pg_catalog.has_schema_privilege(c.connamespace, 'USAGE');
  IF deferred_list IS NOT NULL THEN
    EXECUTE 'SET CONSTRAINTS ' || deferred_list || ' DEFERRED';
  END IF;
  RETURN jsonb_build_object('results', array_to_json(results)::jsonb);
END
$$;

-- Executable by synchro_app: push calls it as the caller. Called directly it is push
-- with a search_path of the caller's choosing for the caller's own statements, which
-- the caller could set anyway.
REVOKE ALL ON FUNCTION synchro._push_run(text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_run(text, jsonb, text) TO synchro_app;

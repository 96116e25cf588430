-- synchro.push: applies a client's mutations in one transaction with compare-and-swap
-- on opaque row versions, idempotent by mutation id (CONTRACT.md "Push").
--
-- SECURITY INVOKER on purpose: the row writes run with the caller's own privileges and
-- row-level security. Registry reads, reservation locks and outcome records go through
-- SECURITY DEFINER helpers. Each mutation runs in its own savepoint (the BEGIN ...
-- EXCEPTION block), so a conflict or a rejection does not undo the others; every
-- failure that is not the mutation's own fault is re-raised and fails the whole call.
-- Pull visibility is not touched here: the fence trigger emits the WAL message, and
-- only WAL materialization makes the write visible to pull.
CREATE OR REPLACE FUNCTION synchro.push(client_id text, mutations jsonb) RETURNS jsonb
LANGUAGE plpgsql
-- Row images render the same whatever the caller's session settings.
SET "TimeZone" TO 'UTC'
SET "DateStyle" TO 'ISO'
SET "IntervalStyle" TO 'postgres'
SET extra_float_digits TO 3
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
  deferred_list text;
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
    keypred := format('t.%I = $1::%s', m ->> 'key_column', m ->> 'key_pg_type');
    BEGIN
      -- A key over 2048 bytes (octet_length of its text; docs/errors.md) cannot be
      -- indexed: a btree entry is at most about 2.7 kB, so row_version's primary key (or
      -- the application's own) would fail the whole call with 54000, and a client would
      -- send that mutation for ever. Reject just this mutation, as a data exception, and
      -- record the outcome like any other. The limit is the fence trigger's too.
      IF octet_length(m ->> 'key') > 2048 THEN
        RAISE EXCEPTION 'push: the key is longer than 2048 bytes'
          USING ERRCODE = 'string_data_right_truncation', COLUMN = m ->> 'key_column';
      END IF;
      -- Lock the source row first, then the reservation: the order a direct write
      -- takes them (row, then fence), so the two never deadlock each other.
      IF m ->> 'op' <> 'insert' THEN
        EXECUTE format('SELECT to_jsonb(t) FROM ONLY %s t WHERE %s FOR UPDATE', tgt, keypred) INTO cur USING m ->> 'key';
      END IF;
      SELECT * INTO ent FROM synchro._push_enter(client_id, (m ->> 'id')::uuid, (m ->> 'relation_id')::bigint, m ->> 'key');
      IF m ->> 'op' = 'insert' THEN
        -- An insert locks no source row (it needs no UPDATE privilege), so read the row
        -- only once the reservation is locked: a direct write holds that lock until it
        -- commits, so the row read here is the row of the version in ent.
        EXECUTE format('SELECT to_jsonb(t) FROM ONLY %s t WHERE %s', tgt, keypred) INTO cur USING m ->> 'key';
      END IF;
      written := NULL;
      outcome := NULL;

      IF m ->> 'op' = 'insert' THEN
        IF cur IS NOT NULL THEN
          outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
                                        'version', ent.version, 'row', synchro._row_image(cur, cols));
        ELSE
          SELECT string_agg(format('%I', k), ', ') INTO col_list FROM jsonb_object_keys(m -> 'row') k;
          EXECUTE format(
            'INSERT INTO %s AS t (%s) SELECT %s FROM jsonb_populate_record(NULL::%s, $1) '
            'ON CONFLICT (%I) DO NOTHING RETURNING to_jsonb(t)',
            tgt, col_list, col_list, tgt, m ->> 'key_column')
          INTO written USING m -> 'row';
          IF written IS NULL THEN
            -- The key exists after all (inserted concurrently, or hidden from this
            -- caller by row-level security): a conflict, with what the caller may see.
            -- Lock its reservation again (it exists now), then read the row: the
            -- version and the row are those of one committed state.
            SELECT * INTO ent FROM synchro._push_enter(client_id, (m ->> 'id')::uuid, (m ->> 'relation_id')::bigint, m ->> 'key');
            EXECUTE format('SELECT to_jsonb(t) FROM ONLY %s t WHERE %s', tgt, keypred) INTO cur USING m ->> 'key';
            outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
              'version', CASE WHEN cur IS NULL THEN NULL ELSE ent.version END,
              'row', synchro._row_image(cur, cols));
          END IF;
        END IF;
      ELSIF cur IS NULL THEN
        -- Update or delete of an absent row (or one this caller cannot see).
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict', 'version', NULL, 'row', NULL);
      ELSIF ent.version IS DISTINCT FROM m ->> 'base_version' OR ent.deleted THEN
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'conflict',
                                      'version', ent.version, 'row', synchro._row_image(cur, cols));
      ELSIF m ->> 'op' = 'update' THEN
        SELECT string_agg(format('%I', k), ', ') INTO col_list FROM jsonb_object_keys(m -> 'row') k;
        IF col_list IS NULL THEN
          -- An update that sets nothing still passes the fence: a new version.
          EXECUTE format('UPDATE ONLY %s AS t SET %I = t.%I WHERE %s RETURNING to_jsonb(t)',
                         tgt, m ->> 'key_column', m ->> 'key_column', keypred)
          INTO written USING m ->> 'key';
        ELSE
          EXECUTE format(
            'UPDATE ONLY %s AS t SET (%s) = (SELECT %s FROM jsonb_populate_record(NULL::%s, $2)) '
            'WHERE %s RETURNING to_jsonb(t)', tgt, col_list, col_list, tgt, keypred)
          INTO written USING m ->> 'key', m -> 'row';
        END IF;
        IF written IS NULL THEN
          RAISE EXCEPTION 'row-level security hid the row from the update' USING ERRCODE = 'insufficient_privilege';
        END IF;
      ELSE
        EXECUTE format('DELETE FROM ONLY %s AS t WHERE %s RETURNING jsonb_build_object()', tgt, keypred)
        INTO written USING m ->> 'key';
        IF written IS NULL THEN
          RAISE EXCEPTION 'row-level security hid the row from the delete' USING ERRCODE = 'insufficient_privilege';
        END IF;
      END IF;

      ver := synchro._push_leave((m ->> 'relation_id')::bigint, m ->> 'key');
      IF outcome IS NULL THEN
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'accepted', 'version', ver);
        IF m ->> 'op' <> 'delete' THEN
          outcome := outcome || jsonb_build_object('row', synchro._row_image(written, cols));
        END IF;
      END IF;
    EXCEPTION WHEN OTHERS THEN
      GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, con = CONSTRAINT_NAME, colname = COLUMN_NAME;
      IF left(st, 2) IN ('22', '23') OR st IN ('42501', 'P0001') THEN
        outcome := jsonb_build_object('id', m ->> 'id', 'status', 'rejected', 'code', st,
                                      'reason', synchro._reject_reason(st, con, colname));
      ELSE
        -- Not this mutation's fault (serialization, deadlock, timeout, fence order,
        -- unsupported operation, ...): the whole call fails, nothing is written.
        RAISE;
      END IF;
    END;
    PERFORM synchro._push_record(client_id, (m ->> 'id')::uuid, m ->> 'hash', outcome);
    results := results || outcome;
  END LOOP;
  -- SET CONSTRAINTS lasts for the transaction. A push is meant to be its own
  -- transaction; when a caller runs it inside a larger one, give the rest of that
  -- transaction the declared modes back: initially deferred constraints deferred again.
  SELECT string_agg(DISTINCT format('%I.%I', n.nspname, c.conname), ', ') INTO deferred_list
    FROM pg_catalog.pg_constraint c JOIN pg_catalog.pg_namespace n ON n.oid = c.connamespace
   WHERE c.condeferrable AND c.condeferred;
  IF deferred_list IS NOT NULL THEN
    EXECUTE 'SET CONSTRAINTS ' || deferred_list || ' DEFERRED';
  END IF;
  RETURN jsonb_build_object('results', array_to_json(results)::jsonb);
END
$$;

REVOKE ALL ON FUNCTION synchro.push(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro.push(text, jsonb) TO synchro_app;

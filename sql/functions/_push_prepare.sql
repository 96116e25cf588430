-- Validates a whole push call before anything is written and returns one plan item per
-- mutation. Malformed input is SY400 (naming the field, never a value); a mutation id
-- already decided for this client with other content is SY410; a decided one with the
-- same content carries its recorded outcome. SECURITY DEFINER: it reads the registry
-- and the recorded outcomes, which applications cannot read directly. Executable by
-- synchro_app only for push, and refuses any other caller (synchro._called_from_push).
CREATE OR REPLACE FUNCTION synchro._push_prepare(client_id text, mutations jsonb) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  n int;
  i int;
  m jsonb;
  rel record;
  cols name[];
  op text;
  key_text text;
  pk jsonb;
  num numeric;
  row_in jsonb;
  bad text;
  items jsonb[] := '{}';
  ids text[] := '{}';
  item jsonb;
  rec record;
  hash bytea;
  legacy bytea;
  reg_err text;
BEGIN
  IF NOT synchro._called_from_push() THEN
    RAISE EXCEPTION 'push helpers are called by synchro.push only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  -- At REPEATABLE READ or SERIALIZABLE every read below sees the registry of the
  -- caller's snapshot: after an activation committed, such a push checked and wrote
  -- the columns of the generation that activation retired, and returned a column no
  -- longer registered (TestPushRepeatableReadAfterActivation). Locking the active
  -- generation's row fails with 40001 when an activation updated it after the snapshot
  -- (waiting for one in flight first): the caller retries the whole transaction, as for
  -- any stale REPEATABLE READ snapshot, and the retry sees the new registry. READ
  -- COMMITTED takes a new snapshot per statement and skips the lock: concurrent pushes
  -- would otherwise share (multixact) locks on this one row. A read-only transaction
  -- writes nothing a stale registry could shape (its replays return recorded outcomes),
  -- and may not lock rows (25006).
  IF current_setting('transaction_isolation') <> 'read committed'
     AND current_setting('transaction_read_only') = 'off' THEN
    PERFORM FROM synchro.registry_generation g WHERE g.state = 'active' FOR SHARE;
  END IF;
  IF client_id IS NULL OR length(client_id) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'push: client_id must be 1 to 256 characters' USING ERRCODE = 'SY400';
  END IF;
  IF mutations IS NULL OR jsonb_typeof(mutations) <> 'array' THEN
    RAISE EXCEPTION 'push: mutations must be a JSON array' USING ERRCODE = 'SY400';
  END IF;
  n := jsonb_array_length(mutations);
  IF n NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'push: mutations must hold 1 to 1000 items' USING ERRCODE = 'SY400';
  END IF;

  FOR i IN 0 .. n - 1 LOOP
    m := mutations -> i;
    IF jsonb_typeof(m) <> 'object' THEN
      RAISE EXCEPTION 'push: mutation % must be an object', i USING ERRCODE = 'SY400';
    END IF;
    SELECT k INTO bad FROM jsonb_object_keys(m) k
     WHERE k NOT IN ('id', 'table', 'op', 'pk', 'base_version', 'row') LIMIT 1;
    IF FOUND THEN
      RAISE EXCEPTION 'push: mutation % has an unknown field', i USING ERRCODE = 'SY400';
    END IF;
    IF jsonb_typeof(m -> 'id') IS DISTINCT FROM 'string'
       OR (m ->> 'id') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
      RAISE EXCEPTION 'push: mutation % id must be a UUID string', i USING ERRCODE = 'SY400';
    END IF;
    op := m ->> 'op';
    IF jsonb_typeof(m -> 'op') IS DISTINCT FROM 'string' OR op NOT IN ('insert', 'update', 'delete') THEN
      RAISE EXCEPTION 'push: mutation % op must be insert, update or delete', i USING ERRCODE = 'SY400';
    END IF;
    IF jsonb_typeof(m -> 'table') IS DISTINCT FROM 'string' THEN
      RAISE EXCEPTION 'push: mutation % table must be a table_id string', i USING ERRCODE = 'SY400';
    END IF;
    -- What the registry decides (the table, its key, its registered columns) is checked
    -- in a block of its own: a mutation decided before, whose table or columns an
    -- operator changed since, is still a replay of its recorded outcome (the contract
    -- keeps outcomes as long as the client exists), not SY400. Its error waits for the
    -- outcome lookup below (TestPushIdempotency/ReplayAfterRegistryChange).
    reg_err := NULL;
    BEGIN
      SELECT r.*, reg.columns AS registered INTO rel
        FROM synchro.relation r
        JOIN synchro.registration reg ON reg.relation_id = r.relation_id
        JOIN synchro.registry_generation g ON g.generation = reg.generation AND g.state = 'active'
       WHERE r.table_id = m ->> 'table' AND r.registration_kind = 'synced';
      IF NOT FOUND THEN
        RAISE EXCEPTION 'push: mutation % names an unknown table_id', i USING ERRCODE = 'SY400';
      END IF;
      cols := rel.registered;

      -- pk: a JSON string for string keys, a JSON integer for int and int64 keys.
      pk := m -> 'pk';
      IF rel.key_type = 'string' THEN
        IF jsonb_typeof(pk) IS DISTINCT FROM 'string' THEN
          RAISE EXCEPTION 'push: mutation % pk must be a JSON string for this table', i USING ERRCODE = 'SY400';
        END IF;
        key_text := pk #>> '{}';
        IF rel.key_pg_type = 'uuid' THEN
          IF key_text !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
            RAISE EXCEPTION 'push: mutation % pk must be a UUID for this table', i USING ERRCODE = 'SY400';
          END IF;
          key_text := lower(key_text);
          pk := to_jsonb(key_text);
        END IF;
      ELSE
        IF jsonb_typeof(pk) IS DISTINCT FROM 'number' THEN
          RAISE EXCEPTION 'push: mutation % pk must be a JSON number for this table', i USING ERRCODE = 'SY400';
        END IF;
        num := (pk #>> '{}')::numeric;
        IF num <> trunc(num)
           OR (rel.key_type = 'int' AND num NOT BETWEEN -2147483648 AND 2147483647)
           OR (rel.key_type = 'int64' AND num NOT BETWEEN -9223372036854775808 AND 9223372036854775807) THEN
          RAISE EXCEPTION 'push: mutation % pk is not an integer in range of the key type', i USING ERRCODE = 'SY400';
        END IF;
        key_text := num::bigint::text;
        pk := to_jsonb(num::bigint);
      END IF;

      IF op = 'insert' AND m ? 'base_version' THEN
        RAISE EXCEPTION 'push: mutation % is an insert and must not carry base_version', i USING ERRCODE = 'SY400';
      END IF;
      IF op <> 'insert' AND jsonb_typeof(m -> 'base_version') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'push: mutation % base_version is required (a string) for update and delete', i USING ERRCODE = 'SY400';
      END IF;

      row_in := m -> 'row';
      IF row_in IS NOT NULL AND jsonb_typeof(row_in) <> 'object' THEN
        RAISE EXCEPTION 'push: mutation % row must be an object', i USING ERRCODE = 'SY400';
      END IF;
      IF op = 'delete' AND row_in IS NOT NULL AND row_in <> '{}'::jsonb THEN
        RAISE EXCEPTION 'push: mutation % is a delete and must not carry row columns', i USING ERRCODE = 'SY400';
      END IF;
      row_in := coalesce(row_in, '{}'::jsonb);
      SELECT k INTO bad FROM jsonb_object_keys(row_in) k WHERE NOT (k = ANY (cols::text[])) LIMIT 1;
      IF FOUND THEN
        RAISE EXCEPTION 'push: mutation % row holds a column that is not registered', i USING ERRCODE = 'SY400';
      END IF;
      -- A column the database generates (GENERATED ALWAYS: an identity or a computed
      -- column) cannot be written, the key of an insert included: naming one failed the
      -- whole call with 428C9, and every retry the same way.
      SELECT k INTO bad
        FROM jsonb_object_keys(CASE WHEN op = 'insert' THEN row_in || jsonb_build_object(rel.key_column, pk) ELSE row_in END) k
        JOIN pg_attribute a ON a.attrelid = rel.relid AND a.attname = k
       WHERE a.attidentity = 'a' OR a.attgenerated <> ''
       LIMIT 1;
      IF FOUND THEN
        RAISE EXCEPTION 'push: mutation % names a column the database generates (GENERATED ALWAYS)', i USING ERRCODE = 'SY400';
      END IF;
      IF row_in ? rel.key_column THEN
        IF (rel.key_type = 'string' AND (jsonb_typeof(row_in -> rel.key_column) <> 'string'
              OR (CASE WHEN rel.key_pg_type = 'uuid' THEN lower(row_in ->> rel.key_column) ELSE row_in ->> rel.key_column END) <> key_text))
           OR (rel.key_type <> 'string' AND (jsonb_typeof(row_in -> rel.key_column) <> 'number'
              OR (row_in ->> rel.key_column)::numeric <> key_text::numeric)) THEN
          RAISE EXCEPTION 'push: mutation % row repeats the key column with another value', i USING ERRCODE = 'SY400';
        END IF;
      END IF;
      IF op = 'insert' THEN
        row_in := row_in || jsonb_build_object(rel.key_column, pk);
      ELSE
        row_in := row_in - rel.key_column::text;
      END IF;

    EXCEPTION WHEN SQLSTATE 'SY400' THEN
      GET STACKED DIAGNOSTICS reg_err = MESSAGE_TEXT;
    END;

    IF lower(m ->> 'id') = ANY (ids) THEN
      RAISE EXCEPTION 'push: mutation id appears twice in one call (mutation %)', i USING ERRCODE = 'SY400';
    END IF;

    ids := ids || lower(m ->> 'id');
    IF reg_err IS NOT NULL THEN
      items := items || jsonb_build_object('id', lower(m ->> 'id'), 'content', m, 'invalid', reg_err);
      CONTINUE;
    END IF;
    items := items || jsonb_build_object(
      'id', lower(m ->> 'id'), 'content', m, 'op', op, 'relation_id', rel.relation_id,
      'table_id', rel.table_id, 'schema', rel.schema_name, 'table', rel.table_name,
      'key_column', rel.key_column, 'key_pg_type', rel.key_pg_type, 'key', key_text, 'pk', pk,
      'base_version', m -> 'base_version', 'row', row_in, 'columns', to_jsonb(cols::text[]));
  END LOOP;

  -- A retired client id (synchro.retire_client) is refused: the device continues as a
  -- new client. The client's lock, shared by its pushes and taken exclusively by
  -- retire_client, is held to the end of this transaction, so the check below (a new
  -- snapshot under READ COMMITTED) sees a retirement that committed before, and a
  -- retirement after waits for this push and deletes what it records.
  PERFORM pg_advisory_xact_lock_shared(hashtextextended('synchro.client/' || client_id, synchro._lock_seed()));
  IF EXISTS (SELECT 1 FROM synchro.retired_client rc WHERE rc.client_id = _push_prepare.client_id) THEN
    RAISE EXCEPTION 'rebuild_required: this client_id was retired; continue as a new client' USING ERRCODE = 'SY409';
  END IF;

  -- Idempotency. Concurrent pushes of the same (client, mutation id) serialize on a
  -- transaction-scoped advisory lock, taken in one global order to avoid deadlocks,
  -- keyed with the install's secret seed (no other role can hold it by guessing).
  PERFORM pg_advisory_xact_lock(h)
     FROM (SELECT DISTINCT hashtextextended(client_id || '/' || p, synchro._lock_seed()) AS h
             FROM unnest(ids) p ORDER BY 1) locks;
  FOR i IN 1 .. n LOOP
    item := items[i];
    IF item ? 'invalid' THEN
      -- Invalid under the current registry: a replay only if an outcome was recorded
      -- for this id with this content, the key spelled as the mutation spells it or as
      -- the registry canonicalized it then (a uuid in lowercase, an integer as an
      -- integer), or the legacy hash. Else the deferred SY400.
      SELECT o.content_hash, o.outcome INTO rec
        FROM synchro.mutation_outcome o
       WHERE o.client_id = _push_prepare.client_id AND o.mutation_id = (item ->> 'id')::uuid;
      IF FOUND AND rec.content_hash IN (
           SELECT sha256(convert_to(((item -> 'content') || jsonb_build_object('id', item ->> 'id', 'pk', c.pk))::text, 'UTF8'))
             FROM (SELECT item -> 'content' -> 'pk' AS pk
                   UNION ALL
                   SELECT to_jsonb(lower(item -> 'content' ->> 'pk'))
                    WHERE jsonb_typeof(item -> 'content' -> 'pk') = 'string'
                      AND (item -> 'content' ->> 'pk') ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                   UNION ALL
                   SELECT to_jsonb((item -> 'content' ->> 'pk')::numeric::bigint)
                    WHERE jsonb_typeof(item -> 'content' -> 'pk') = 'number'
                      AND (item -> 'content' ->> 'pk')::numeric = trunc((item -> 'content' ->> 'pk')::numeric)
                      AND (item -> 'content' ->> 'pk')::numeric BETWEEN -9223372036854775808 AND 9223372036854775807) c
           UNION ALL
           SELECT sha256(convert_to(((item -> 'content') || jsonb_build_object('id', item ->> 'id'))::text, 'UTF8'))) THEN
        items[i] := jsonb_build_object('id', item ->> 'id', 'outcome', rec.outcome);
        CONTINUE;
      END IF;
      RAISE EXCEPTION '%', item ->> 'invalid' USING ERRCODE = 'SY400';
    END IF;
    -- The content, with the id and the key in canonical form: how they are spelled is
    -- not content. The id in lowercase; the key as the row it names (a uuid in
    -- lowercase, an integer as an integer: 7.0 is 7), which pushes recorded before the
    -- twelfth session's release did not canonicalize: a replay of one of those matches
    -- its recorded (legacy) hash, computed with the key as it was sent.
    hash := sha256(convert_to(((item -> 'content') || jsonb_build_object('id', item ->> 'id', 'pk', item -> 'pk'))::text, 'UTF8'));
    legacy := sha256(convert_to(((item -> 'content') || jsonb_build_object('id', item ->> 'id'))::text, 'UTF8'));
    SELECT o.content_hash, o.outcome INTO rec
      FROM synchro.mutation_outcome o
     WHERE o.client_id = _push_prepare.client_id AND o.mutation_id = (item ->> 'id')::uuid;
    IF FOUND THEN
      IF rec.content_hash <> hash AND rec.content_hash <> legacy THEN
        RAISE EXCEPTION 'push: mutation id % was already decided for this client with different content', item ->> 'id'
          USING ERRCODE = 'SY410';
      END IF;
      item := item || jsonb_build_object('outcome', rec.outcome);
    END IF;
    items[i] := (item - 'content') || jsonb_build_object('hash', encode(hash, 'hex'));
  END LOOP;
  RETURN array_to_json(items)::jsonb;
END
$$;

REVOKE ALL ON FUNCTION synchro._push_prepare(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION synchro._push_prepare(text, jsonb) TO synchro_app;

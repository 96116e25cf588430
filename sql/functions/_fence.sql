-- The version fence: AFTER INSERT/UPDATE/DELETE row trigger on every registered
-- relation. For each row operation that actually happens it
--   1. checks that the fences of this row fire in row-operation order (27000),
--   2. locks or creates the row's canonical identity reservation (synchro.row_version),
--   3. allocates an opaque transition version and a UUID fence_id,
--   4. takes the next registered-DML ordinal,
--   5. records the transition (and, under push, the immutable write fence), and
--   6. emits one transactional logical message (docs/wire-format.md).
-- It makes nothing pull-visible: only WAL materialization does.
--
-- Arguments (set by synchro._install_triggers): relation_id, registration_kind,
-- table_id ('' for dependencies), schema, table, key column, live-tuple probe SQL,
-- installing transaction id, relation file node at install.
--
-- Out-of-order check. PostgreSQL fires the AFTER ROW triggers of a statement when
-- that statement ends, so a nested statement (in a BEFORE trigger, a function in the
-- SET list, another AFTER trigger) can change a row and fire its fence before the
-- fence of an earlier change of that same row. The reservation remembers the tuple
-- (xmin, cmin) the last fence covered and the 64-bit top-level transaction id. A fence
-- is late, and the transaction must fail, when this row was already fenced in this
-- transaction and either the live tuple is that already-fenced tuple (a later change
-- fenced first), or an INSERT/UPDATE finds no live tuple (a later delete fenced first).
CREATE OR REPLACE FUNCTION synchro._fence() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
-- No SET search_path here: a SET clause costs a GUC save/restore on every row, and
-- every name below is schema-qualified (pg_catalog is always searched first).
AS $$
DECLARE
  rid     bigint := TG_ARGV[0]::bigint;
  rowj    jsonb;
  op      text;
  k       text;
  old_k   text;
  new_k   text;
  cur_txid xid8 := pg_catalog.pg_current_xact_id();
  res     record;
  live_xmin xid;
  live_cmin cid;
  v       text := synchro._new_version();
  fid     uuid := pg_catalog.gen_random_uuid();
  ord     bigint;
  ctx     record;
  msg     json;
BEGIN
  IF TG_OP = 'INSERT' THEN
    op := 'insert';
    rowj := pg_catalog.to_jsonb(NEW);
    new_k := rowj ->> TG_ARGV[5];
    k := new_k;
  ELSIF TG_OP = 'UPDATE' THEN
    op := 'update';
    rowj := pg_catalog.to_jsonb(NEW);
    new_k := rowj ->> TG_ARGV[5];
    old_k := pg_catalog.to_jsonb(OLD) ->> TG_ARGV[5];
    -- A BEFORE UPDATE trigger that runs after the key guard can still change the key.
    IF old_k IS DISTINCT FROM new_k THEN
      RAISE EXCEPTION 'primary-key value change on a registered row is not supported (delete and insert instead)'
        USING ERRCODE = 'feature_not_supported';
    END IF;
    k := new_k;
  ELSE
    op := 'delete';
    rowj := pg_catalog.to_jsonb(OLD);
    old_k := rowj ->> TG_ARGV[5];
    k := old_k;
  END IF;

  -- COPY FREEZE. PostgreSQL accepts it only in the (sub)transaction that created the
  -- relation or gave it a new file, and a frozen tuple does not keep the command
  -- order the check below relies on. The trigger arguments remember the transaction
  -- that installed them and the relation's file then: only when this transaction
  -- installed them, or the file changed since, can this insert be a COPY FREEZE, and
  -- only then is the statement text inspected (it is not free for huge statements).
  IF TG_OP = 'INSERT'
     AND (TG_ARGV[7]::xid8 = cur_txid OR pg_catalog.pg_relation_filenode(TG_RELID) <> TG_ARGV[8]::oid)
     AND pg_catalog.current_query() ~* '\mcopy\M[^;]*\mfreeze\M' THEN
    RAISE EXCEPTION 'COPY FREEZE into a registered relation is not supported'
      USING ERRCODE = 'feature_not_supported';
  END IF;

  SELECT r.fence_txid, r.fence_xmin, r.fence_cmin INTO res
    FROM synchro.row_version r
   WHERE r.relation_id = rid AND r.pk = k
     FOR UPDATE;

  IF TG_OP <> 'DELETE' OR res.fence_txid = cur_txid THEN
    EXECUTE TG_ARGV[6] INTO live_xmin, live_cmin USING k;
    IF res.fence_txid = cur_txid AND (
         (TG_OP <> 'DELETE' AND live_xmin IS NULL)
         OR (live_xmin = res.fence_xmin AND live_cmin = res.fence_cmin)) THEN
      RAISE EXCEPTION 'fence order violation: a nested statement changed a registered row before the fence of its earlier change fired'
        USING ERRCODE = 'triggered_data_change_violation';
    END IF;
  END IF;

  INSERT INTO synchro.row_version AS r (relation_id, pk, version, deleted, fence_txid, fence_xmin, fence_cmin)
  VALUES (rid, k, v, TG_OP = 'DELETE', cur_txid, live_xmin, live_cmin)
  ON CONFLICT (relation_id, pk) DO UPDATE
    SET version = excluded.version, deleted = excluded.deleted, fence_txid = excluded.fence_txid,
        fence_xmin = excluded.fence_xmin, fence_cmin = excluded.fence_cmin;

  ord := pg_catalog.nextval('synchro.fence_ordinal');

  -- Under synchro.push, the mutation being applied to exactly this row gets an
  -- immutable write fence in the same transaction as the row change.
  SELECT c.client_id, c.mutation_id INTO ctx
    FROM synchro.push_context c
   WHERE c.txid = cur_txid AND c.relation_id = rid AND c.pk = k;
  IF FOUND THEN
    INSERT INTO synchro.write_fence (fence_id, client_id, mutation_id, relation_id, pk, op, version)
    VALUES (fid, ctx.client_id, ctx.mutation_id, rid, k, op, v);
  END IF;

  IF TG_ARGV[1] = 'synced' THEN
    msg := pg_catalog.json_build_object(
      'v', 1, 'kind', 'synced', 'relation_id', rid, 'schema', TG_ARGV[3], 'table', TG_ARGV[4],
      'op', op, 'old_key', old_k, 'new_key', new_k, 'version', v, 'fence_id', fid, 'ordinal', ord,
      'table_id', TG_ARGV[2], 'pk', rowj -> TG_ARGV[5]);
  ELSE
    msg := pg_catalog.json_build_object(
      'v', 1, 'kind', 'capture_dependency', 'relation_id', rid, 'schema', TG_ARGV[3], 'table', TG_ARGV[4],
      'op', op, 'old_key', old_k, 'new_key', new_k, 'version', v, 'fence_id', fid, 'ordinal', ord,
      'capture_key', k);
  END IF;
  PERFORM pg_catalog.pg_logical_emit_message(true, 'synchro.fence', msg::text);
  RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION synchro._fence() FROM PUBLIC;

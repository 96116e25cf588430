-- The version fence, generated per registered relation from this one template.
--
-- _fence_source(relation_id) returns the CREATE FUNCTION statement of
-- synchro._fence_<relation_id>(), the AFTER INSERT/UPDATE/DELETE row trigger of that
-- relation. It is generated (rather than one generic trigger) so that every statement
-- in it is static SQL with a cached plan and the key is read as NEW.<key> directly: a
-- generic trigger needed a dynamic EXECUTE and to_jsonb(NEW) per row and cost about
-- 3.5 times as much (docs/benchmarks.md). _install_triggers and _refresh_fences (run
-- by every install) regenerate it, so the body is still defined once, here.
--
-- For each row operation that actually happens the fence
--   1. checks that the fences of this row fire in row-operation order (27000),
--   2. locks or creates the row's canonical identity reservation (synchro.row_version),
--   3. allocates an opaque transition version and a UUID fence_id,
--   4. takes the next registered-DML ordinal,
--   5. records the transition (and, under push, the immutable write fence), and
--   6. emits one transactional logical message (docs/wire-format.md), authenticated by
--      a MAC under the server key (synchro._message_mac).
-- It makes nothing pull-visible: only WAL materialization does.
--
-- Out-of-order check. PostgreSQL fires the AFTER ROW triggers of a statement when
-- that statement ends, so a nested statement (in a BEFORE trigger, a function in the
-- SET list, another AFTER trigger) can change a row and fire its fence before the
-- fence of an earlier change of that same row. The reservation remembers the tuple
-- (xmin, cmin) the last fence covered and the 64-bit top-level transaction id. A fence
-- is late, and the transaction must fail, when this row was already fenced in this
-- transaction and either the live tuple is that already-fenced tuple (a later change
-- fenced first), or an INSERT/UPDATE finds no live tuple (a later delete fenced first).
--
-- COPY FREEZE. PostgreSQL accepts it only in the (sub)transaction that created the
-- relation or gave it a new file, and a frozen tuple does not keep the command order
-- the check relies on. The generated function remembers the transaction that
-- installed it and the relation's file then: only when this transaction installed it,
-- or the file changed since, can an insert be a COPY FREEZE, and only then is the
-- statement text inspected (not free for huge statements).
CREATE OR REPLACE FUNCTION synchro._fence_source(rid bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.relation;
  pk_json text;
  ident text;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
  -- The typed key of the message: a JSON number for int keys, a string otherwise.
  pk_json := CASE WHEN r.key_type = 'string' THEN 'k' ELSE 'k::bigint' END;
  -- The kind-specific fields of the message.
  ident := CASE WHEN r.registration_kind = 'synced'
                THEN format('''table_id'', %L, ''pk'', %s', r.table_id, pk_json)
                ELSE '''capture_key'', k' END;
  RETURN format($template$
CREATE OR REPLACE FUNCTION synchro.%1$I() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
-- Pinned search_path (docs/security.md): this runs with the owner's rights inside the
-- writer's statement, so no operator, type or function of the writer's search_path
-- (its own schema, or pg_temp, which is searched first for types unless listed) may
-- resolve here. Qualifying names is not enough: unqualified operators (=, ~*, IS
-- DISTINCT FROM) and casts (::text) resolve through search_path, and pg_catalog is
-- searched first only when the path does not list it later. Cost: the SET clause is a
-- GUC save/restore on every fenced row, about 1.5-2 us (docs/benchmarks.md, "The fence's
-- pinned search_path"): small next to the rest of the fence, and the price of the rule.
SET search_path = pg_catalog, pg_temp
AS $fence$
DECLARE
  k         text;
  old_k     text;
  new_k     text;
  cur_txid  xid8 := pg_catalog.pg_current_xact_id();
  prev      record;
  live_xmin xid;
  live_cmin cid;
  v         text := pg_catalog.replace(pg_catalog.gen_random_uuid()::text, '-', '');
  fid       uuid := pg_catalog.gen_random_uuid();
  ord       bigint;
  ctx       record;
  mac       pg_catalog.text;  -- the message's MAC (issue 13)
  ipad      pg_catalog.bytea; -- the server key's HMAC pads, read with the live tuple (issue 13)
  opad      pg_catalog.bytea;
  refused   pg_catalog.text;  -- SQLSTATE of a refused json value (issue 13)
BEGIN
  IF TG_OP = 'INSERT' THEN
    new_k := NEW.%17$s::text;
    k := new_k;
    IF (%7$L::xid8 = cur_txid OR pg_catalog.pg_relation_filenode(TG_RELID) <> %8$s::oid)
       AND pg_catalog.current_query() ~* '\mcopy\M[^;]*\mfreeze\M' THEN
      RAISE EXCEPTION 'COPY FREEZE into a registered relation is not supported'
        USING ERRCODE = 'feature_not_supported';
    END IF;
  ELSIF TG_OP = 'UPDATE' THEN
    new_k := NEW.%17$s::text;
    old_k := OLD.%17$s::text;
    -- A BEFORE UPDATE trigger that runs after the key guard can still change the key.
    IF old_k IS DISTINCT FROM new_k THEN
      RAISE EXCEPTION 'primary-key value change on a registered row is not supported (delete and insert instead)'
        USING ERRCODE = 'feature_not_supported';
    END IF;
    k := new_k;
  ELSE
    old_k := OLD.%17$s::text;
    k := old_k;
  END IF;

  -- Source refusals (issue 13): a key or a registered value that the key indexes or
  -- the row image cannot hold fails the writing statement with a class-22 SQLSTATE,
  -- naming the rule, never the value (synchro._fence_value_checks).
  -- The key is checked when it enters (a key cannot change): a row registered with a
  -- longer key stays updatable and deletable.
  IF TG_OP = 'INSERT' AND pg_catalog.octet_length(k) > 1024 THEN
    RAISE EXCEPTION 'registered key of relation_id %% is over 1024 bytes (documented key limit)', %6$s
      USING ERRCODE = 'string_data_right_truncation';
  END IF;
  IF TG_OP <> 'DELETE' THEN
    NULL;%13$s
  END IF;

  -- The live tuple of this key now (none after a delete). The same statement reads
  -- the server key's pads for the message MAC below (issue 13): a statement of its
  -- own would cost more than the MAC.
  SELECT t.xmin, t.cmin, sk.inner_pad, sk.outer_pad INTO live_xmin, live_cmin, ipad, opad
    FROM synchro.server_key sk LEFT JOIN ONLY %2$I.%3$I t ON t.%17$s = k::%5$s;

  -- Lock the reservation and record this fence, keeping what the previous fence saw.
  UPDATE synchro.row_version r
     SET version = v, deleted = (TG_OP = 'DELETE'), fence_txid = cur_txid, fence_xmin = live_xmin, fence_cmin = live_cmin
    FROM (SELECT o.fence_txid, o.fence_xmin, o.fence_cmin FROM synchro.row_version o
           WHERE o.relation_id = %6$s AND o.pk = k FOR UPDATE) p
   WHERE r.relation_id = %6$s AND r.pk = k
  RETURNING p.fence_txid, p.fence_xmin, p.fence_cmin INTO prev;
  IF NOT FOUND THEN
    INSERT INTO synchro.row_version AS r (relation_id, pk, version, deleted, fence_txid, fence_xmin, fence_cmin)
    VALUES (%6$s, k, v, TG_OP = 'DELETE', cur_txid, live_xmin, live_cmin)
    ON CONFLICT (relation_id, pk) DO UPDATE
      SET version = excluded.version, deleted = excluded.deleted, fence_txid = excluded.fence_txid,
          fence_xmin = excluded.fence_xmin, fence_cmin = excluded.fence_cmin;
  ELSIF prev.fence_txid = cur_txid AND (
          (TG_OP <> 'DELETE' AND live_xmin IS NULL)
          OR (live_xmin = prev.fence_xmin AND live_cmin = prev.fence_cmin)) THEN
    RAISE EXCEPTION 'fence order violation: a nested statement changed a registered row before the fence of its earlier change fired'
      USING ERRCODE = 'triggered_data_change_violation';
  END IF;

  ord := pg_catalog.nextval('synchro.fence_ordinal');

  -- Under synchro.push (flagged by its SECURITY DEFINER helper; the row it wrote is
  -- what counts), the mutation applied to exactly this row gets an immutable write
  -- fence in the same transaction as the row change.
  IF pg_catalog.current_setting('synchro.push_active', true) = 'on' THEN
    SELECT c.client_id, c.mutation_id INTO ctx
      FROM synchro.push_context c
     WHERE c.txid = cur_txid AND c.relation_id = %6$s AND c.pk = k;
    IF FOUND THEN
      INSERT INTO synchro.write_fence (fence_id, client_id, mutation_id, relation_id, pk, op, version)
      VALUES (fid, ctx.client_id, ctx.mutation_id, %6$s, k, pg_catalog.lower(TG_OP), v);
    END IF;
  END IF;

  -- Authenticated message (issue 13): anyone may emit a 'synchro.fence' message, so
  -- the runner counts only one whose "mac" matches: synchro._message_mac over
  -- synchro._message_body, inlined here (a function call per row costs more than the
  -- MAC). The server key is read at run time, as the owner, never put in this
  -- generated source (pg_proc.prosrc is world-readable); every operator and function
  -- applied to it is qualified, so no object of the writer's search_path sees it.
  mac := pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(opad OPERATOR(pg_catalog.||)
            pg_catalog.sha256(ipad OPERATOR(pg_catalog.||) '\x%16$s'::pg_catalog.bytea OPERATOR(pg_catalog.||)
              pg_catalog.convert_to(pg_catalog.concat(%14$L,
                pg_catalog.length(pg_catalog.lower(TG_OP)), ':', pg_catalog.lower(TG_OP),
                pg_catalog.length(old_k), ':', old_k, pg_catalog.length(new_k), ':', new_k,
                pg_catalog.length(v), ':', v, '36:', fid, pg_catalog.length(ord::pg_catalog.text), ':', ord,
                %15$s), 'UTF8'))), 1, 16), 'hex');
  PERFORM pg_catalog.pg_logical_emit_message(true, 'synchro.fence', pg_catalog.json_build_object(
    'v', 2, 'kind', %9$L, 'relation_id', %6$s, 'schema', %10$L, 'table', %11$L,
    'op', pg_catalog.lower(TG_OP), 'old_key', old_k, 'new_key', new_k, 'version', v, 'fence_id', fid,
    'ordinal', ord, %12$s, 'mac', mac)::text);
  RETURN NULL;
END
$fence$;
REVOKE ALL ON FUNCTION synchro.%1$I() FROM PUBLIC;
$template$,
    '_fence_' || r.relation_id,                -- 1 function name
    r.schema_name, r.table_name, r.key_column, -- 2 3 4
    r.key_pg_type,                             -- 5 one of five fixed type names (table constraint)
    r.relation_id,                             -- 6
    pg_current_xact_id(),                      -- 7 installing transaction
    pg_relation_filenode(r.relid::regclass),   -- 8 relation file at install
    r.registration_kind,                       -- 9
    r.schema_name, r.table_name,               -- 10 11 registered identity
    ident,                                     -- 12
    synchro._fence_value_checks(rid),          -- 13 source refusals of registered values
    -- 14 15: the constant head of the MAC body (synchro._message_body: v, kind,
    -- relation_id, schema, table) and its fields after ordinal (table_id, pk,
    -- capture_key); 16: the MAC's domain prefix, 'synchro.msg' 0x00 prefix 0x00, in hex
    concat('1:2', length(r.registration_kind), ':', r.registration_kind,
           length(r.relation_id::text), ':', r.relation_id, length(r.schema_name), ':', r.schema_name,
           length(r.table_name), ':', r.table_name),
    CASE WHEN r.registration_kind = 'synced'
         THEN format('%L, pg_catalog.length(k), '':'', k, '':''', concat(length(r.table_id), ':', r.table_id))
         ELSE ''':'', '':'', pg_catalog.length(k), '':'', k' END,
    encode(convert_to('synchro.msg', 'UTF8') || '\x00'::bytea || convert_to('synchro.fence', 'UTF8') || '\x00'::bytea, 'hex'),
    synchro._pl_ident(r.key_column));           -- 17 the key as a field of NEW/OLD
END
$$;

REVOKE ALL ON FUNCTION synchro._fence_source(bigint) FROM PUBLIC;

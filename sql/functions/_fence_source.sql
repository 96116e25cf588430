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
--   1. refuses what the source must refuse (key change, COPY FREEZE, oversized values),
--   2. takes a random transition version, the next registered-DML ordinal and a UUID
--      fence_id in ordinal order (one random draw for both), and renders the message
--      body (wire format 3, docs/wire-format.md),
--   3. in one statement: creates or locks and updates the row's canonical identity
--      reservation (synchro.row_version) with the new version, where the update's
--      WHERE is the row-operation order check (27000 when it refuses), and emits one
--      transactional logical message, authenticated by a MAC under the server key.
--      The first fence of a row in a transaction fired by a top-level statement (the
--      common case) needs no live-tuple probe; every other fence reads the live tuple
--      of its key in the same statement (below, "Out-of-order check"),
--   4. under push, records the immutable write fence.
-- It makes nothing pull-visible: only WAL materialization does.
--
-- Why one statement, and assignments for the rest: the fence runs in every writing
-- transaction, and each statement of a trigger pays its executor start-up (locks,
-- plan-state build of every node) once per transaction, more than its own work on one
-- row; PL/pgSQL assignments pay only a small expression set-up (docs/benchmarks.md,
-- "Fence cost").
--
-- Out-of-order check. PostgreSQL fires the AFTER ROW triggers of a statement when
-- that statement ends, so a nested statement (in a BEFORE trigger, a function in the
-- SET list, another AFTER trigger) can change a row and fire its fence before the
-- fence of an earlier change of that same row. The reservation remembers the 64-bit
-- top-level transaction id of the row's last fence and, when that fence read it, the
-- live tuple it covered (its identity, below). A fence is late, and the transaction must fail,
-- when this row was already fenced in this transaction and either the live tuple is
-- that already-fenced tuple (a later change fenced first), or an INSERT/UPDATE finds
-- no live tuple (a later delete fenced first: a delete after this fence's operation
-- and before its statement ended would have been a nested statement's, fenced
-- already), or a DELETE follows a delete fence (a later insert and delete fenced
-- first: in commit order two deletes of one key always have a fenced insert between
-- them, whose fence would be the row's last). A fence fired by a top-level statement is never early (the fences still
-- pending then are that statement's own, in the order of its row operations), so when
-- it is the row's first in the transaction it records no tuple and reads none; any
-- later fence of the row still runs the check, against the tuple a nested fence
-- recorded, if any. A delete's fence compares but records no tuple: the live tuple it
-- reads can be its own statement's later re-insert of the key (a data-modifying CTE,
-- DELETE ... RETURNING feeding an INSERT: both fences fire when the statement ends), and
-- recording it made that insert's fence look late, refusing a legal statement
-- (TestFencePlaceCTEReplace*). No later fence needs a delete's record: an insert or
-- update that finds the key gone refuses on "no live tuple", a delete refuses on the
-- delete fence before it (the record's deleted flag: a late delete finds the key gone
-- too, after a nested insert and delete of it, TestFencePlaceLateDeleteAfterNested*),
-- and one that finds a re-insert compares with the record of the re-insert's own fence,
-- which fired first if the re-insert came later (an insert or update cannot be followed
-- by another change of its row within its own statement: the statement's snapshot does
-- not see the new tuple).
--
-- The covered tuple's identity is its place: the relation's file and the tuple's ctid,
-- in the reservation's fence_xmin and fence_cmin columns (32 bits each; their names
-- are from migration 00001, whose (xmin, cmin) identity this replaced: adding columns
-- to the table every fence writes takes a lock that waits for every open writer). It
-- was (xmin, cmin) until 2026-12: a savepoint that touched the tuple and rolled back
-- (an application trigger's "try, and ignore a duplicate") turns the tuple's cmin into
-- a combo command id, and the check then let a late fence through or refused a legal
-- transaction (TestXidAuditFenceOrder*). The place is sound within one transaction:
--   - the tuple a fence recorded was written by this transaction (the row was fenced
--     in it, so its live version is this transaction's), by a subtransaction not
--     aborted (an abort rolls the record back with it): vacuum and pruning keep it
--     while the transaction runs, so no other tuple can take its ctid;
--   - only a rewrite (CLUSTER, an ALTER TABLE that rewrites) moves it, into a new
--     file: the file number tells the two apart, so a later change that lands in the
--     new file where the covered tuple was in the old one is no false match. A
--     rewrite cannot come between a nested fence and the late one it must catch:
--     PostgreSQL refuses to rewrite a table with trigger events pending
--     (CheckTableNotInUse), and the late fence's are.
-- The ctid is packed as block * 2048 + offset, modulo 2^32 (an offset is below 2048
-- for every block size): exact up to 2^21 blocks (16 GiB of 8 KiB pages). Past that,
-- two tuples 2^21 blocks apart at the same offset compare equal, and the only effect of
-- such a false match is a refusal (27000) of a legal transaction, never a late fence
-- let through: the same tuple always packs the same.
--
-- COPY FREEZE. PostgreSQL accepts it only in the (sub)transaction that created the
-- relation or gave it a new file, and a frozen tuple does not keep the command order
-- the check relies on. The generated function remembers the transaction that
-- installed it and the relation's file then: only when this transaction installed it,
-- or the file changed since in this very transaction (synchro._file_changed_here: a
-- rewrite in an earlier one, VACUUM FULL, is no COPY FREEZE), can an insert be a COPY
-- FREEZE, and only then is the statement text inspected (not free for huge statements).
CREATE OR REPLACE FUNCTION synchro._fence_source(rid bigint) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
  r synchro.relation;
BEGIN
  SELECT * INTO STRICT r FROM synchro.relation WHERE relation_id = rid;
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
-- The source refusals measure values as the runner renders them, so under the runner's
-- rendering settings (runner/conn.go sessionParams), not the writer's: with
-- extra_float_digits = -15 a float8 prints about 9 times shorter, and a row the
-- walsender could not render (over 1 GB as text, at every restart: the stream stopped
-- for good) passed the 128 MiB check (TestFenceMeasuresUnderRunnerSettings);
-- bytea_output escape halves printable bytes. TimeZone is left to the writer: UTC's
-- offset (+00) is the shortest there is, so another zone only measures longer.
-- These four cost about 11,000 instructions a row together (scripts/fence-instructions:
-- 3.5 percent of the fence, 309,712 before).
SET "DateStyle" = 'ISO'
SET "IntervalStyle" = 'postgres'
SET extra_float_digits = 3
SET bytea_output = 'hex'
-- The full check's plan must not evaluate the table's CHECK constraints, which the
-- planner folds (running the application's IMMUTABLE functions as the owner) only
-- under constraint_exclusion = on, a setting any writer may choose.
SET constraint_exclusion = 'partition'
AS $fence$
<<fence>>
DECLARE
  k   text;                   -- the key as text; fence.k where the table's columns are in scope
  v   text;                   -- the transition version (for the write fence under push)
  fid uuid;                   -- the fence_id (idem)
  ctx record;
  lsn pg_catalog.pg_lsn;
  refused pg_catalog.text;    -- SQLSTATE of a refused json value (issue 13)
  sz  pg_catalog.int8;        -- bytes of the registered values, then of the row, as text (issue 13)
  big boolean;                -- a registered value's rendering overflowed
  deep boolean;               -- registered json nested deeper than the documented limit
  jb  pg_catalog.jsonb;       -- a registered json or jsonb value, as jsonb
  ord pg_catalog.text;        -- the registered-DML ordinal, as text
  body pg_catalog.text;       -- the message body (wire format 3), without its MAC
  stk pg_catalog.text;        -- the call stack (PG_CONTEXT): one line when a top-level statement fired it
BEGIN
  -- The firing table under its registered name (relation drift otherwise): the full
  -- check below reads the table by that name with the owner's rights, and after a
  -- rename the name could be the application's view, whose functions ran as the owner
  -- (TestFenceRefusesRenamedRelation). A write to a renamed or moved registered table
  -- is refused here, at the source, rather than reaching the WAL in a shape capture
  -- must block on. Within this statement the name cannot move: the writer holds the
  -- table's lock, and a rename needs an exclusive one.
  IF TG_TABLE_NAME OPERATOR(pg_catalog.<>) %3$L OR TG_TABLE_SCHEMA OPERATOR(pg_catalog.<>) %2$L THEN
    RAISE EXCEPTION 'registered relation_id %% was renamed or moved (relation drift): rename it back, or rebind it',
      %6$s USING ERRCODE = 'feature_not_supported';
  END IF;
  -- Before any expression on a column: the columns still have their types of when
  -- this was generated (synchro._fence_type_checks).%14$s
  IF TG_OP = 'INSERT' THEN
    k := NEW.%13$s::text;
    IF (%7$L::xid8 = pg_catalog.pg_current_xact_id()
        OR (pg_catalog.pg_relation_filenode(TG_RELID) <> %8$s::oid AND synchro._file_changed_here(TG_RELID)))
       AND pg_catalog.current_query() ~* E'\\mcopy\\M.*(\\mfreeze\\M|u&")' THEN
      RAISE EXCEPTION 'COPY FREEZE into a registered relation is not supported'
        USING ERRCODE = 'feature_not_supported';
    END IF;
  ELSIF TG_OP = 'UPDATE' THEN
    k := NEW.%13$s::text;
    -- A BEFORE UPDATE trigger that runs after the key guard can still change the key.
    -- Compared byte for byte: under a nondeterministic collation of the key column
    -- ('a' and 'A' equal, case-insensitive ICU), the guard's WHEN clause sees no change,
    -- yet the key's text, which is its identity in the stream, changed (the transaction
    -- was then quarantined: TestFenceRefusesKeyChangeUnderNondeterministicCollation).
    IF OLD.%13$s::text COLLATE pg_catalog."C" IS DISTINCT FROM k COLLATE pg_catalog."C" THEN
      RAISE EXCEPTION 'primary-key value change on a registered row is not supported (delete and insert instead)'
        USING ERRCODE = 'feature_not_supported';
    END IF;
  ELSE
    k := OLD.%13$s::text;
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
    NULL;%9$s
  END IF;

  -- The fence's values: one random draw (~5 us through OpenSSL) is the transition
  -- version: its 32 hex digits (122 random bits), so the version clients see says
  -- nothing about the write. The next registered-DML ordinal. The fence_id, ordered by
  -- that ordinal: a UUIDv8 (RFC 9562's custom layout) of the ordinal as 12 hex digits,
  -- version 8, then the draw's last 74 random bits and its variant. It is unique by its
  -- ordinal (the sequence never cycles), and by the random bits past 2^48 ordinals,
  -- where lpad keeps only the leading 12 hex digits and the order is lost (each writing
  -- session burns up to 1,000 cached ordinals: about 9 years at 1,000 new writing
  -- sessions a second). The ledger's unique index on fence_id (synchro.event; the key of
  -- synchro.write_fence) then takes inserts at a few points near its right edge (one
  -- per writing session's cached block), as the ledger does: random ids sent every
  -- insert to a random leaf, and after each checkpoint a full-page image of that leaf
  -- to the WAL (docs/benchmarks.md, "fence ids in allocation order"). Then the message
  -- body (wire format 3, docs/wire-format.md). Plain assignments (textcat for the id):
  -- PL/pgSQL evaluates them without an executor start-up.
  v := pg_catalog.replace(pg_catalog.gen_random_uuid()::pg_catalog.text, '-', '');
  ord := pg_catalog.nextval('synchro.fence_ordinal');
  fid := (pg_catalog.lpad(pg_catalog.to_hex(ord::pg_catalog.int8), 12, '0') || '8'
          || pg_catalog.substr(v, 14))::pg_catalog.uuid;
  body := pg_catalog.concat(%10$L, CASE TG_OP WHEN 'INSERT' THEN '1:i' WHEN 'UPDATE' THEN '1:u' ELSE '1:d' END,
            pg_catalog.length(k), ':', k, '32:', v, '36:', fid, pg_catalog.length(ord), ':', ord, %11$L);

  -- Fast path (issue 7): the first fence of this row in this transaction, fired by a
  -- top-level statement (the call stack is this one frame: no statement, function or
  -- trigger encloses the one whose fences fire now). Such a fence cannot be late: the
  -- only fences still pending when a top-level statement's fire are its own, queued in
  -- the order of its own row operations, all later than anything fenced before; and
  -- with no earlier fence of this row in this transaction there is nothing to compare.
  -- So it needs no live-tuple probe: one write of the reservation, created or updated
  -- (recording this transaction, no tuple: a later fence of the row compares against
  -- nothing but still refuses an INSERT/UPDATE that finds no live tuple), whose
  -- RETURNING emits the authenticated message (body, then its MAC under the server key,
  -- read at run time as the owner, never put in this generated source; every operator
  -- and function applied to it is qualified). When the row was already fenced in this
  -- transaction the update is refused, nothing is emitted, and the full check below
  -- runs. A nested fence (push's writes among them) always takes the full check.
  --
  -- Only while the replica identity is still the primary key of when this was generated
  -- (ADR 001: FULL, NOTHING and USING INDEX are drift): a C function of the relation
  -- cache, no query (about 1.8 percent of the fence). Any other answer (NULL for NOTHING
  -- and FULL, another index for USING INDEX, or the key's index rebuilt under a new OID
  -- by REINDEX CONCURRENTLY) takes the full check, which reads the identity from the
  -- catalog and refuses drift there. pgoutput would block capture on such a write, and
  -- wal2json cannot see a change to NOTHING (an insert carries no identity) or to USING
  -- INDEX on the key's own column (its identity list looks like DEFAULT's): refused at
  -- the source, neither decoder sees it.
  GET DIAGNOSTICS stk = PG_CONTEXT;
  IF pg_catalog.strpos(stk, E'\n') = 0
     AND pg_catalog.pg_get_replica_identity_index(TG_RELID)::pg_catalog.oid OPERATOR(pg_catalog.=) %15$s::pg_catalog.oid THEN
    INSERT INTO synchro.row_version AS r (relation_id, pk, version, deleted, fence_txid)
    VALUES (%6$s, k, v, TG_OP = 'DELETE', pg_catalog.pg_current_xact_id())
    ON CONFLICT (relation_id, pk) DO UPDATE
      SET version = excluded.version, deleted = excluded.deleted, fence_txid = excluded.fence_txid,
          fence_xmin = NULL, fence_cmin = NULL
      WHERE r.fence_txid IS DISTINCT FROM excluded.fence_txid
    RETURNING (SELECT pg_catalog.pg_logical_emit_message(true, 'synchro.fence', body OPERATOR(pg_catalog.||)
                 pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(sk.outer_pad OPERATOR(pg_catalog.||)
                   pg_catalog.sha256(sk.inner_pad OPERATOR(pg_catalog.||) pg_catalog.decode('%12$s', 'hex') OPERATOR(pg_catalog.||)
                     pg_catalog.convert_to(body, 'UTF8'))), 1, 16), 'hex'))
                 FROM synchro.server_key sk)
    INTO lsn;
  END IF;

  -- The full check, in one statement (each statement of a trigger costs its executor
  -- start-up in every transaction, more than its work for one row):
  --   p: the live tuple of this key now (none after a delete) and the server key's HMAC
  --      pads;
  --   w: one write of the reservation: created, or locked and updated, recording the
  --      tuple this fence covers (none for a delete). Its WHERE is the out-of-order
  --      check, against the live tuple p read: it refuses the
  --      update, so w returns no row, when this row was already fenced in this
  --      transaction and either the live tuple is the one the previous fence covered
  --      (a later change fenced first), an INSERT/UPDATE finds no live tuple (a
  --      later delete fenced first), or a DELETE follows a delete fence (a later
  --      insert and delete fenced first);
  --   then, only when w wrote, the authenticated message as above.
  -- A replica identity other than DEFAULT is drift (ADR 001), refused here at the
  -- source (the fast path sends every write whose identity is not the generated key's
  -- index here). Its own IF inside lsn IS NULL: in one condition with it, the subquery
  -- made the whole condition a query that the fast path paid for too (+40,000
  -- instructions a row).
  IF lsn IS NULL THEN
    IF (SELECT c.relreplident FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) TG_RELID)
       OPERATOR(pg_catalog.<>) 'd' THEN
      RAISE EXCEPTION 'registered relation_id %% no longer has REPLICA IDENTITY DEFAULT (relation drift): ALTER TABLE ... REPLICA IDENTITY DEFAULT',
        %6$s USING ERRCODE = 'feature_not_supported';
    END IF;
    -- The identity DEFAULT names must still be the registered key: a primary key dropped
    -- (no identity: an update or delete carries none) or moved to another column (the
    -- fast path's index test sends both here) reached the WAL and blocked the stream
    -- (relation_drift) for every scope (TestDdlEdgeKeyDriftRefusedAtSource).
    -- (The key columns of the constraint, as readiness's key check reads them: a
    -- primary key's INCLUDE columns are not among them.)
    IF NOT EXISTS (
        SELECT FROM pg_catalog.pg_constraint con
          JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) con.conrelid
                                        AND a.attnum OPERATOR(pg_catalog.=) con.conkey[1]
         WHERE con.conrelid OPERATOR(pg_catalog.=) TG_RELID AND con.contype OPERATOR(pg_catalog.=) 'p'
           AND pg_catalog.cardinality(con.conkey) OPERATOR(pg_catalog.=) 1
           AND a.attname OPERATOR(pg_catalog.=) %4$L) THEN
      RAISE EXCEPTION 'registered relation_id %% no longer has its registered primary key (relation drift): restore the key, or register the relation again',
        %6$s USING ERRCODE = 'feature_not_supported';
    END IF;
  END IF;
  -- The full check plans a query on the table as the owner, and planning evaluates
  -- the constant-argument IMMUTABLE functions of the table's index and statistics
  -- expressions: refused when one is the application's (synchro._planned_app_code).
  -- Its CHECK constraints are folded only under constraint_exclusion = on (the SET
  -- clause above).
  IF lsn IS NULL AND synchro._planned_app_code(TG_RELID) THEN
    RAISE EXCEPTION 'registered relation_id %% has an index or statistics expression that calls a function or operator of the application (the fence would plan it as the pack owner): hand the function to a superuser or drop the expression',
      %6$s USING ERRCODE = 'feature_not_supported';
  END IF;
  IF lsn IS NULL THEN
    WITH p AS (
      SELECT CASE WHEN t.ctid IS NOT NULL THEN pg_catalog.pg_relation_filenode(TG_RELID)::pg_catalog.text::pg_catalog.xid END AS live_xmin,
             ((((t.ctid::pg_catalog.text::pg_catalog.point)[0])::pg_catalog.int8 * 2048
               + ((t.ctid::pg_catalog.text::pg_catalog.point)[1])::pg_catalog.int8) %% 4294967296)::pg_catalog.text::pg_catalog.cid AS live_cmin,
             sk.inner_pad, sk.outer_pad,
             pg_catalog.pg_current_xact_id() AS txid
        FROM synchro.server_key sk LEFT JOIN ONLY %2$I.%3$I t ON t.%4$I = fence.k::%5$s),
    w AS (
      INSERT INTO synchro.row_version AS r (relation_id, pk, version, deleted, fence_txid, fence_xmin, fence_cmin)
      SELECT %6$s, k, v, TG_OP = 'DELETE', p.txid,
             CASE WHEN TG_OP <> 'DELETE' THEN p.live_xmin END, CASE WHEN TG_OP <> 'DELETE' THEN p.live_cmin END
        FROM p
      ON CONFLICT (relation_id, pk) DO UPDATE
        SET version = excluded.version, deleted = excluded.deleted, fence_txid = excluded.fence_txid,
            fence_xmin = excluded.fence_xmin, fence_cmin = excluded.fence_cmin
        WHERE (r.fence_txid = excluded.fence_txid AND (
                 (NOT excluded.deleted AND excluded.fence_xmin IS NULL)
                 OR (excluded.deleted AND r.deleted)
                 OR EXISTS (SELECT FROM p WHERE p.live_xmin = r.fence_xmin AND p.live_cmin = r.fence_cmin))) IS NOT TRUE
      RETURNING 1)
    SELECT pg_catalog.pg_logical_emit_message(true, 'synchro.fence', body OPERATOR(pg_catalog.||)
             pg_catalog.encode(pg_catalog.substr(pg_catalog.sha256(p.outer_pad OPERATOR(pg_catalog.||)
               pg_catalog.sha256(p.inner_pad OPERATOR(pg_catalog.||) pg_catalog.decode('%12$s', 'hex') OPERATOR(pg_catalog.||)
                 pg_catalog.convert_to(body, 'UTF8'))), 1, 16), 'hex'))
      INTO lsn
      FROM p, w;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'fence order violation: a nested statement changed a registered row before the fence of its earlier change fired'
        USING ERRCODE = 'triggered_data_change_violation';
    END IF;
  END IF;

  -- Under synchro.push (flagged by its SECURITY DEFINER helper; the row it wrote is
  -- what counts), the mutation applied to exactly this row gets an immutable write
  -- fence in the same transaction as the row change.
  IF pg_catalog.current_setting('synchro.push_active', true) = 'on' THEN
    SELECT c.client_id, c.mutation_id INTO ctx
      FROM synchro.push_context c
     WHERE c.txid = pg_catalog.pg_current_xact_id() AND c.relation_id = %6$s AND c.pk = k;
    IF FOUND THEN
      INSERT INTO synchro.write_fence (fence_id, client_id, mutation_id, relation_id, pk, op, version)
      VALUES (fid, ctx.client_id, ctx.mutation_id, %6$s, k, pg_catalog.lower(TG_OP), v);
    END IF;
  END IF;
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
    synchro._fence_value_checks(rid),          -- 9 source refusals of registered values
    -- 10 11: the constant head of the message body (wire format 3: v, kind,
    -- relation_id, schema, table) and its kind-specific tail (synced: table_id and
    -- the key's JSON type); 12: the MAC's domain prefix, 'synchro.msg' 0x00 prefix
    -- 0x00, in hex
    concat('1:3', '1:', CASE WHEN r.registration_kind = 'synced' THEN 's' ELSE 'c' END,
           length(r.relation_id::text), ':', r.relation_id, length(r.schema_name), ':', r.schema_name,
           length(r.table_name), ':', r.table_name),
    CASE WHEN r.registration_kind = 'synced'
         THEN concat(length(r.table_id), ':', r.table_id, '1:', CASE WHEN r.key_type = 'string' THEN 's' ELSE 'n' END)
         ELSE '' END,
    encode(convert_to('synchro.msg', 'UTF8') || decode('00', 'hex') || convert_to('synchro.fence', 'UTF8') || decode('00', 'hex'), 'hex'),
    synchro._pl_ident(r.key_column),           -- 13 the key as a field of NEW/OLD
    synchro._fence_type_checks(rid),           -- 14 the columns' types are as generated
    coalesce((SELECT i.indexrelid FROM pg_index i   -- 15 the primary key's index (0: none)
               WHERE i.indrelid = r.relid AND i.indisprimary), 0));
END
$$;

REVOKE ALL ON FUNCTION synchro._fence_source(bigint) FROM PUBLIC;

-- Queries of the WAL runner (runner/). LSNs cross as text: sqlc has no pg_lsn type,
-- so parameters are cast text::pg_lsn and results pg_lsn::text (pglogrepl.ParseLSN /
-- LSN.String() in Go). Nullable results are coalesced to '' / 0 / false, which the
-- callers read as "absent".

-- Control session (runner/control.go): take the runner claim (advisory lock + runner row).
-- name: RunnerClaim :exec
SELECT synchro.runner_claim(sqlc.arg(owner)::text, sqlc.arg(pid)::int, sqlc.arg(slot_name)::text,
                            sqlc.arg(publication)::text, sqlc.arg(heartbeat_interval)::interval,
                            sqlc.arg(decoder)::text);

-- Control session (runner/control.go): the server version, to check the capabilities the runner needs.
-- name: ServerVersionNum :one
SELECT current_setting('server_version_num')::int AS server_version_num;

-- Control session (runner/control.go): whether every role may emit logical messages
-- (PUBLIC keeps EXECUTE on either pg_logical_emit_message): under wal2json a stranger's
-- huge message stops capture (docs/decoders.md), which the runner warns of at start.
-- name: PublicEmitsMessages :one
SELECT (has_function_privilege('public', 'pg_catalog.pg_logical_emit_message(boolean,text,text)', 'EXECUTE')
        OR has_function_privilege('public', 'pg_catalog.pg_logical_emit_message(boolean,text,bytea)', 'EXECUTE'))::boolean
       AS public_emits;

-- Control session (runner/control.go): periodic liveness, last received LSN (NULL before any) and state.
-- name: RunnerHeartbeat :exec
SELECT synchro.runner_heartbeat(sqlc.narg(received_lsn)::text::pg_lsn, sqlc.arg(state)::text);

-- Control session (runner/control.go): mark the runner stopped at a clean exit.
-- name: RunnerRelease :exec
SELECT synchro.runner_release();

-- readState (runner/control.go, session.go): the active stream's durable progress and blocking
-- poison; no row before the first stream. '' / 0 / false stand for NULL.
-- name: RunnerState :one
SELECT s.stream_generation::bigint                     AS stream_generation,
       coalesce(s.slot_name, '')::text                 AS slot_name,
       coalesce(s.generation_start_lsn::text, '')::text AS generation_start_lsn,
       coalesce(s.materialized_commit_lsn::text, '')::text AS materialized_commit_lsn,
       coalesce(s.processed_end_lsn::text, '')::text   AS processed_end_lsn,
       coalesce(s.acknowledged_end_lsn::text, '')::text AS acknowledged_end_lsn,
       coalesce(s.registry_generation, 0)::bigint      AS registry_generation,
       coalesce(s.poison_commit_lsn::text, '')::text   AS poison_commit_lsn,
       coalesce(s.poison_class, '')::text              AS poison_class,
       coalesce(s.retry_requested, false)::boolean     AS retry_requested,
       coalesce(s.plugin, '')::text                    AS plugin,
       coalesce(s.retry_seq, 0)::bigint                AS retry_seq
FROM synchro.runner_state() AS s(stream_generation, slot_name, generation_start_lsn, materialized_commit_lsn,
                                 processed_end_lsn, acknowledged_end_lsn, registry_generation,
                                 poison_commit_lsn, poison_class, retry_requested, plugin, retry_seq);

-- slotPosition (runner/control.go): the slot as pg_replication_slots shows it, for reconciliation
-- and for recording acknowledgements; no row when it does not exist. '' stands for NULL.
-- name: SlotPosition :one
SELECT coalesce(confirmed_flush_lsn::text, '')::text AS confirmed_flush_lsn,
       coalesce(active, false)::boolean              AS active,
       coalesce(plugin, '')::text                    AS plugin,
       coalesce(wal_status, '')::text                AS wal_status
FROM pg_catalog.pg_replication_slots
WHERE slot_name = sqlc.arg(slot_name)::name AND database = current_database() AND slot_type = 'logical';

-- Bootstrap (runner/bootstrap.go): drop a slot left by an unfinished first start or a failed baseline.
-- name: DropReplicationSlot :exec
SELECT pg_drop_replication_slot(sqlc.arg(slot_name)::name);

-- Bootstrap (runner/bootstrap.go): materialize the baseline under the slot's exported snapshot
-- and create stream generation 1 at the consistent point.
-- name: RunnerBaseline :one
SELECT synchro.runner_baseline(sqlc.arg(slot_name)::text, sqlc.arg(plugin)::text,
                               sqlc.arg(consistent_point)::text::pg_lsn)::bigint AS stream_generation;

-- Reconciliation (runner/session.go): move a slot that is behind the durable acknowledgement up to it.
-- name: AdvanceReplicationSlot :exec
SELECT pg_replication_slot_advance(sqlc.arg(slot_name)::name, sqlc.arg(upto)::text::pg_lsn);

-- Apply session (runner/apply.go): create the session's pg_temp.synchro_stage.
-- name: RunnerStageOpen :exec
SELECT synchro.runner_stage_open();

-- Applier (runner/apply.go): materialize a staged batch of source transactions, inside its database
-- transaction.
-- name: MaterializeBatch :one
SELECT synchro.materialize_batch(sqlc.arg(stream_generation)::bigint, sqlc.arg(commit_lsns)::text[]::pg_lsn[],
                                 sqlc.arg(end_lsns)::text[]::pg_lsn[], sqlc.arg(xids)::bigint[],
                                 sqlc.arg(commit_times)::timestamptz[], sqlc.arg(set_based)::boolean)::text[] AS outcomes;

-- Applier (runner/apply.go), pipelined batches: the half that needs only the staged batch, on the
-- batch's session while the batch before still writes; the registry generation it prepared under,
-- 0 when it prepared nothing (generations start at 1).
-- name: MaterializePrepare :one
SELECT coalesce(synchro.materialize_prepare(sqlc.arg(stream_generation)::bigint, sqlc.arg(commit_lsns)::text[]::pg_lsn[],
                                            sqlc.arg(end_lsns)::text[]::pg_lsn[], sqlc.arg(xids)::bigint[],
                                            sqlc.arg(commit_times)::timestamptz[]), 0)::bigint AS prepared;

-- Applier (runner/apply.go), pipelined batches: the half that follows the batch before, once it
-- committed, in the batch's database transaction; whether it wrote from what was prepared.
-- name: MaterializeWrite :one
SELECT w.outcomes::text[] AS outcomes, w.from_prepared::boolean AS prepared
  FROM synchro.materialize_write(sqlc.arg(stream_generation)::bigint, sqlc.narg(prepared)::bigint,
                                 sqlc.arg(commit_lsns)::text[]::pg_lsn[], sqlc.arg(end_lsns)::text[]::pg_lsn[],
                                 sqlc.arg(xids)::bigint[], sqlc.arg(commit_times)::timestamptz[]) AS w;

-- Applier (runner/msgauth): the server key's HMAC pads, read once per session to
-- authenticate the pack's logical messages before they are staged.
-- name: RunnerMessageKey :one
SELECT k.inner_pad::bytea AS inner_pad, k.outer_pad::bytea AS outer_pad FROM synchro.runner_message_key() AS k;

-- Applier (runner/apply.go): move the processed boundary to an idle WAL position; returns the boundary now in force.
-- name: RunnerIdle :one
SELECT synchro.runner_idle(sqlc.arg(boundary)::text::pg_lsn)::text AS processed_end_lsn;

-- Applier and reconciliation (runner/apply.go, session.go): record the slot's acknowledged boundary.
-- name: RunnerAck :exec
SELECT synchro.runner_ack(sqlc.arg(lsn)::text::pg_lsn);

-- Applier (runner/apply.go): quarantine a poison source transaction (relation_id NULL when
-- unknown; attempt_seq: the retry request the session ran under, runner_state's retry_seq).
-- name: RunnerPoison :exec
SELECT synchro.runner_poison(sqlc.arg(stream_generation)::bigint, sqlc.arg(commit_lsn)::text::pg_lsn,
                             sqlc.arg(failure_class)::text, sqlc.narg(relation_id)::bigint,
                             sqlc.arg(attempt_seq)::bigint);

-- Applier (runner/apply.go, stage.go): the registered columns of every relation (union over
-- the generations from from_generation on, NULL: the stream's; key included), after the
-- source transaction xid is visible (NULL: none).
-- name: RunnerColumns :many
SELECT c.relid::bigint AS relid, c.columns::text[] AS columns
FROM synchro.runner_columns(sqlc.narg(xid)::bigint, sqlc.narg(from_generation)::bigint) AS c;

-- Liveness (runner/liveness.go): is this backend working on a statement (active, not
-- waiting for a heavyweight lock or for the runner's own client)?
-- name: BackendWorking :one
SELECT EXISTS (
  SELECT 1 FROM pg_catalog.pg_stat_activity a
   WHERE a.pid = sqlc.arg(pid)::int4 AND a.state = 'active'
     AND (a.wait_event_type IS NULL OR a.wait_event_type NOT IN ('Lock', 'Client')))::boolean AS working;

-- Session start (runner/session.go): does the configured publication exist?
-- name: PublicationExists :one
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = sqlc.arg(publication)::name)::boolean AS found;

-- Metrics (runner/observe.go): WAL the slot retains (current WAL position minus its
-- restart_lsn, -1 without the slot), max_slot_wal_keep_size in bytes (-1: unlimited) and
-- the slot's safe_wal_size (WAL that may still be written before it starts losing WAL;
-- -1: unlimited, 0 once lost, -2: no slot; safe_wal_size is NULL both when unlimited and
-- for a lost slot). Catalog views only: nothing is decoded.
-- name: SlotRetention :one
SELECT coalesce((SELECT (pg_catalog.pg_current_wal_lsn() - s.restart_lsn)::int8
                   FROM pg_catalog.pg_replication_slots s
                  WHERE s.slot_name = sqlc.arg(slot_name)::name AND s.database = pg_catalog.current_database()
                    AND s.restart_lsn IS NOT NULL), -1)::int8 AS retained_bytes,
       coalesce((SELECT CASE WHEN st.setting::int8 < 0 THEN -1 ELSE st.setting::int8 * 1048576 END
                   FROM pg_catalog.pg_settings st WHERE st.name = 'max_slot_wal_keep_size'), -1)::int8 AS max_keep_bytes,
       -- safe_wal_size: NULL when unlimited (-1 here) or lost (0 here); negative once the
       -- budget is exceeded (unreserved), -1 of those reported as -2 so that -1 only
       -- ever means unlimited. slot_found false: no slot, safe_bytes means nothing.
       coalesce((SELECT CASE WHEN s.safe_wal_size IS NULL THEN CASE WHEN s.wal_status = 'lost' THEN 0 ELSE -1 END
                             WHEN s.safe_wal_size = -1 THEN -2 ELSE s.safe_wal_size END
                   FROM pg_catalog.pg_replication_slots s
                  WHERE s.slot_name = sqlc.arg(slot_name)::name AND s.database = pg_catalog.current_database()), 0)::int8 AS safe_bytes,
       EXISTS (SELECT FROM pg_catalog.pg_replication_slots s
                WHERE s.slot_name = sqlc.arg(slot_name)::name AND s.database = pg_catalog.current_database()) AS slot_found;

-- Decoder session start (runner/decode/wal2json): the table set of a decoder without a
-- publication, from the registry.
-- name: RunnerTableSet :many
SELECT t.relid::bigint AS relid, t.first_generation::bigint AS first_generation,
       t.generations::bigint[] AS generations, t.columns::text[] AS columns,
       t.column_generations::bigint[] AS column_generations, t.latest_generation::bigint AS latest_generation
FROM synchro.runner_table_set() AS t
ORDER BY t.relid;

-- Decoder session start (runner/decode/wal2json): the live catalog shape of the relations of
-- the table set, as pgoutput's Relation message would describe them (live, non-generated
-- columns in attnum order; key = member of the replica identity index), with each column's
-- type length (-1 for varlena: only those can be an unchanged TOAST value) and base type.
-- name: RelationShapes :many
SELECT c.oid::bigint AS relid, n.nspname::text AS nspname, c.relname::text AS relname,
       c.relreplident::text AS replident,
       coalesce(array_agg(a.attname::text ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::text[] AS col_names,
       coalesce(array_agg(a.atttypid::bigint ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::bigint[] AS col_types,
       coalesce(array_agg(a.atttypmod ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::int[] AS col_typmods,
       coalesce(array_agg(t.typlen::int ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::int[] AS col_typlens,
       coalesce(array_agg(coalesce(nullif(t.typbasetype, 0), t.oid)::bigint ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::bigint[] AS col_base_types,
       coalesce(array_agg(coalesce(a.attnum = ANY (i.indkey::int2[]), false) ORDER BY a.attnum) FILTER (WHERE a.attnum IS NOT NULL), '{}')::boolean[] AS col_keys
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND (
       (c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE c.oid = ANY (sqlc.arg(relids)::bigint[]::oid[])
GROUP BY c.oid, n.nspname, c.relname, c.relreplident, i.indkey;

-- Session (runner/session.go): whether the walsender serving this session's
-- replication connection is decoding (on CPU or reading WAL or spilled changes) when
-- the connection has been silent for the receive timeout. A walsender replaying a
-- transaction it sends nothing of (a bulk write to an unregistered table) answers
-- only every wal_sender_timeout / 2; one waiting for WAL or blocked on its socket
-- would have answered, so that silence is a dead path.
-- name: WalsenderDecoding :one
SELECT coalesce((SELECT a.state = 'active' AND (a.wait_event IS NULL OR a.wait_event_type = 'IO')
                   FROM pg_catalog.pg_stat_activity a
                  WHERE a.pid = sqlc.arg(pid)::int AND a.backend_type = 'walsender'), false)::boolean AS decoding;

-- Runner (runner/pack.go): the newest migration installed (0: none recorded).
-- name: RunnerPackVersion :one
SELECT coalesce(synchro.runner_pack_version(), 0)::bigint AS version;

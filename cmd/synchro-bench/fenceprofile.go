package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fence-profile suite says where a fence's time goes. It times single-row INSERT
// and UPDATE on tables whose AFTER ROW trigger is a staged copy of synchro._fence
// (sql/functions/_fence.sql), each stage adding one part of the real fence, next to a
// plain table and the registered table with the real fence. The copy lives in this
// benchmark's own database only; the pack is never edited. The deltas between
// consecutive stages are the cost of each part.
func init() {
	registerSuite("fence-profile", suite{
		summary: "where a fence's time goes: a staged copy of synchro._fence, part by part",
		run:     runFenceProfile,
	})
}

// fenceStages name what each stage adds; stage 0 is the plain table (no trigger) and
// the last entry is the real, registered fence.
var fenceStages = []string{
	"no trigger (plain)",
	"+ empty AFTER ROW plpgsql trigger (SECURITY DEFINER)",
	"+ to_jsonb(NEW), key, version + fence ids, COPY FREEZE check",
	"+ row_version SELECT FOR UPDATE + upsert",
	"+ live-tuple probe (dynamic EXECUTE)",
	"+ nextval(fence_ordinal) + push_context lookup",
	"+ json_build_object + pg_logical_emit_message (= full copy)",
	"real synchro._fence on a registered table (+ key guard on UPDATE)",
}

// fenceStageFn mirrors synchro._fence as of this commit, with each part behind a stage
// guard (TG_ARGV[9]); the cheap IF tests are the only additions.
const fenceStageFn = `
CREATE SCHEMA bench_profile;
CREATE FUNCTION bench_profile.fence_stage() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
  lvl     int := TG_ARGV[9]::int;
  rid     bigint := TG_ARGV[0]::bigint;
  rowj    jsonb;
  op      text;
  k       text;
  old_k   text;
  new_k   text;
  cur_txid xid8;
  res     record;
  live_xmin xid;
  live_cmin cid;
  v       text;
  fid     uuid;
  ord     bigint;
  ctx     record;
  msg     json;
BEGIN
  IF lvl < 2 THEN
    RETURN NULL;
  END IF;
  cur_txid := pg_catalog.pg_current_xact_id();
  v := synchro._new_version();
  fid := pg_catalog.gen_random_uuid();
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
    IF old_k IS DISTINCT FROM new_k THEN
      RAISE EXCEPTION 'key change' USING ERRCODE = 'feature_not_supported';
    END IF;
    k := new_k;
  ELSE
    op := 'delete';
    rowj := pg_catalog.to_jsonb(OLD);
    old_k := rowj ->> TG_ARGV[5];
    k := old_k;
  END IF;
  IF TG_OP = 'INSERT'
     AND (TG_ARGV[7]::xid8 = cur_txid OR pg_catalog.pg_relation_filenode(TG_RELID) <> TG_ARGV[8]::oid)
     AND pg_catalog.current_query() ~* '\mcopy\M[^;]*\mfreeze\M' THEN
    RAISE EXCEPTION 'COPY FREEZE' USING ERRCODE = 'feature_not_supported';
  END IF;
  IF lvl < 3 THEN
    RETURN NULL;
  END IF;

  SELECT r.fence_txid, r.fence_xmin, r.fence_cmin INTO res
    FROM synchro.row_version r
   WHERE r.relation_id = rid AND r.pk = k
     FOR UPDATE;
  IF lvl >= 4 AND (TG_OP <> 'DELETE' OR res.fence_txid = cur_txid) THEN
    EXECUTE TG_ARGV[6] INTO live_xmin, live_cmin USING k;
    IF res.fence_txid = cur_txid AND (
         (TG_OP <> 'DELETE' AND live_xmin IS NULL)
         OR (live_xmin = res.fence_xmin AND live_cmin = res.fence_cmin)) THEN
      RAISE EXCEPTION 'fence order violation' USING ERRCODE = 'triggered_data_change_violation';
    END IF;
  END IF;
  INSERT INTO synchro.row_version AS r (relation_id, pk, version, deleted, fence_txid, fence_xmin, fence_cmin)
  VALUES (rid, k, v, TG_OP = 'DELETE', cur_txid, live_xmin, live_cmin)
  ON CONFLICT (relation_id, pk) DO UPDATE
    SET version = excluded.version, deleted = excluded.deleted, fence_txid = excluded.fence_txid,
        fence_xmin = excluded.fence_xmin, fence_cmin = excluded.fence_cmin;
  IF lvl < 5 THEN
    RETURN NULL;
  END IF;

  ord := pg_catalog.nextval('synchro.fence_ordinal');
  SELECT c.client_id, c.mutation_id INTO ctx
    FROM synchro.push_context c
   WHERE c.txid = cur_txid AND c.relation_id = rid AND c.pk = k;
  IF FOUND THEN
    INSERT INTO synchro.write_fence (fence_id, client_id, mutation_id, relation_id, pk, op, version)
    VALUES (fid, ctx.client_id, ctx.mutation_id, rid, k, op, v);
  END IF;
  IF lvl < 6 THEN
    RETURN NULL;
  END IF;

  msg := pg_catalog.json_build_object(
    'v', 1, 'kind', 'synced', 'relation_id', rid, 'schema', TG_ARGV[3], 'table', TG_ARGV[4],
    'op', op, 'old_key', old_k, 'new_key', new_k, 'version', v, 'fence_id', fid, 'ordinal', ord,
    'table_id', TG_ARGV[2], 'pk', rowj -> TG_ARGV[5]);
  PERFORM pg_catalog.pg_logical_emit_message(true, 'synchro.fence', msg::text);
  RETURN NULL;
END
$$;`

// stageTrigger attaches the staged copy at stage %[2]d to bench_profile.%[1]s, with the
// same arguments _install_triggers gives the real fence; its relation_id is negative
// so it never meets a registered relation's row_version rows.
const stageTrigger = `
INSERT INTO synchro.row_version (relation_id, pk, version)
SELECT -%[2]d, id::text, synchro._new_version() FROM bench_profile.%[1]s;
DO $do$
BEGIN
  EXECUTE format(
    'CREATE TRIGGER fence_stage AFTER INSERT OR UPDATE OR DELETE ON bench_profile.%[1]s FOR EACH ROW '
    'EXECUTE FUNCTION bench_profile.fence_stage(%%L, %%L, %%L, %%L, %%L, %%L, %%L, %%L, %%L, %%L)',
    -%[2]d, 'synced', '%[1]s', 'bench_profile', '%[1]s', 'id',
    'SELECT xmin, cmin FROM ONLY bench_profile.%[1]s WHERE id = $1::int8',
    pg_current_xact_id(), pg_relation_filenode('bench_profile.%[1]s'), %[2]d);
END
$do$;`

func profileTable(stage int) string {
	if stage == len(fenceStages)-1 {
		return "public.t_fenced"
	}
	return fmt.Sprintf("bench_profile.s%d", stage)
}

func runFenceProfile(ctx context.Context, b *bench) (string, error) {
	const dbname = "bench_fence_profile"
	conn, err := b.newDatabase(ctx, dbname)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	fmt.Fprintf(b.stdout, "setting up %s (%d tables x %d rows) ...\n", dbname, len(fenceStages), preloadRows)
	if _, err := conn.Exec(ctx, fenceStageFn); err != nil {
		return "", fmt.Errorf("staged fence: %w", err)
	}
	maintained := []string{"synchro.row_version"}
	for s := range fenceStages {
		t := profileTable(s)
		schema, name, _ := strings.Cut(t, ".")
		create := strings.Replace(fmt.Sprintf(benchTable, name, preloadRows), "public.", schema+".", 2)
		if _, err := conn.Exec(ctx, create); err != nil {
			return "", fmt.Errorf("create %s: %w", t, err)
		}
		if s >= 1 && s < len(fenceStages)-1 {
			if _, err := conn.Exec(ctx, fmt.Sprintf(stageTrigger, name, s)); err != nil {
				return "", fmt.Errorf("stage trigger on %s: %w", t, err)
			}
		}
		maintained = append(maintained, t)
	}
	if _, err := conn.Exec(ctx, registerFenced); err != nil {
		return "", fmt.Errorf("register t_fenced: %w", err)
	}
	prepare := func() error { return maintain(ctx, conn, maintained) }

	// Part 1: server CPU per row, without commits. Each stage runs cpuLoopRows single-row
	// statements in one transaction that is rolled back, so neither the WAL flush nor the
	// load generator is in the figure; the best of cpuLoopRepeats is kept, since other
	// work on the machine only ever adds time.
	fmt.Fprintf(b.stdout, "  per-row CPU (%d rows in one rolled-back transaction, best of %d) ...\n", cpuLoopRows, cpuLoopRepeats)
	cpu := map[string][]float64{}
	for _, op := range []string{"insert", "update"} {
		for s := range fenceStages {
			if err := prepare(); err != nil {
				return "", err
			}
			us, err := cpuPerRow(ctx, conn, op, profileTable(s))
			if err != nil {
				return "", err
			}
			fmt.Fprintf(b.stdout, "    %-6s stage %d: %6.1f µs/row\n", op, s, us)
			cpu[op] = append(cpu[op], us)
		}
	}

	type key struct {
		op      string
		clients int
		stage   int
	}
	res := map[key]result{}
	ops := []string{"insert", "update"}
	total, step := len(ops)*len(b.cfg.clients)*len(fenceStages), 0
	for oi, op := range ops {
		for ci, c := range b.cfg.clients {
			for k := range fenceStages {
				s := (k + ci + oi) % len(fenceStages)
				t := profileTable(s)
				body := strings.Replace(fmt.Sprintf(insertScript, "X"), "public.X", t, 1)
				if op == "update" {
					body = strings.Replace(fmt.Sprintf(updateScript, "X", preloadRows), "public.X", t, 1)
				}
				script, err := b.writeScript(fmt.Sprintf("profile_%s_%d", op, s), body)
				if err != nil {
					return "", err
				}
				step++
				fmt.Fprintf(b.stdout, "  [%2d/%d] %-6s stage %d %2d clients ... ", step, total, op, s, c)
				r, err := b.measure(ctx, conn, dbname, script, c, prepare)
				if err != nil {
					return "", err
				}
				fmt.Fprintf(b.stdout, "%8.0f tps  %6.3f ms  %5.0f WAL B/tx  load %.1f\n", r.tps, r.latencyMs, r.walPerTx, r.load)
				res[key{op, c, s}] = r
			}
		}
	}

	var sb strings.Builder
	sb.WriteString("### fence-profile: where a fence's time goes\n\n")
	fmt.Fprintf(&sb, "Server time per row, no commit (%d single-row statements in one rolled-back transaction, best of %d): "+
		"the CPU a fence adds, free of WAL-flush and machine-load noise. Δ is the cost of the stage's part.\n\n", cpuLoopRows, cpuLoopRepeats)
	sb.WriteString("| stage | what | INSERT µs/row | Δ | UPDATE µs/row | Δ |\n|---:|---|---:|---:|---:|---:|\n")
	for s, what := range fenceStages {
		di, du := 0.0, 0.0
		if s > 0 && s < len(fenceStages)-1 {
			di, du = cpu["insert"][s]-cpu["insert"][s-1], cpu["update"][s]-cpu["update"][s-1]
		} else if s == len(fenceStages)-1 {
			di, du = cpu["insert"][s]-cpu["insert"][0], cpu["update"][s]-cpu["update"][0]
		}
		fmt.Fprintf(&sb, "| %d | %s | %.1f | %+.1f | %.1f | %+.1f |\n", s, what, cpu["insert"][s], di, cpu["update"][s], du)
	}
	sb.WriteString("\n(The last row's Δ is against the plain table.)\n\n")
	sb.WriteString("Committed single-row transactions with pgbench (durable commits; cells: tps, relative to plain, WAL bytes per transaction):\n\n")
	for _, op := range ops {
		fmt.Fprintf(&sb, "%s:\n\n| stage | what |", strings.ToUpper(op))
		for _, c := range b.cfg.clients {
			fmt.Fprintf(&sb, " %d clients |", c)
		}
		sb.WriteString("\n|---:|---|")
		for range b.cfg.clients {
			sb.WriteString("---:|")
		}
		sb.WriteString("\n")
		for s, what := range fenceStages {
			fmt.Fprintf(&sb, "| %d | %s |", s, what)
			for _, c := range b.cfg.clients {
				r, p := res[key{op, c, s}], res[key{op, c, 0}]
				fmt.Fprintf(&sb, " %.0f (%.2f, %.0f B) |", r.tps, r.tps/p.tps, r.walPerTx)
			}
			sb.WriteString("\n")
		}
		sb.WriteString("\n")
	}
	return sb.String(), nil
}

const (
	cpuLoopRows    = 20_000
	cpuLoopRepeats = 3
)

// cpuPerRow times cpuLoopRows single-row INSERTs (fresh identity keys) or UPDATEs (keys
// 1..cpuLoopRows) on table inside one transaction, rolled back, and returns the best
// per-row time in microseconds. The DO loop runs each statement as a separate
// executor call, so each fires its AFTER ROW trigger once.
func cpuPerRow(ctx context.Context, conn *pgx.Conn, op, table string) (float64, error) {
	stmt := fmt.Sprintf("INSERT INTO %s (v, payload) VALUES (i, 'synchro-bench-payload-0123456789abcdef0123456789abcdef0123456789')", table)
	if op == "update" {
		stmt = fmt.Sprintf("UPDATE %s SET v = v + 1 WHERE id = i", table)
	}
	do := fmt.Sprintf("DO $$ BEGIN FOR i IN 1..%d LOOP %s; END LOOP; END $$", cpuLoopRows, stmt)
	best := math.MaxFloat64
	for range cpuLoopRepeats {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		start := time.Now()
		_, err = tx.Exec(ctx, do)
		el := time.Since(start)
		_ = tx.Rollback(ctx)
		if err != nil {
			return 0, fmt.Errorf("%s on %s: %w", op, table, err)
		}
		best = min(best, float64(el.Microseconds())/cpuLoopRows)
	}
	return best, nil
}

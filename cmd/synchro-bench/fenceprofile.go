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
// and UPDATE on registered tables whose generated fence, synchro._fence_<relation_id>()
// (rendered by synchro._fence_source, sql/functions/_fence_source.sql), is replaced by
// a staged copy of that same rendered text cut short after one more part, next to a
// plain table and a registered table with its fence as installed. The copies are made
// from the template's own output at run time, in this benchmark's database only (the
// pack is never edited), so they follow the template; a cut point the template no
// longer has is an error, not a silently stale profile. The deltas between
// consecutive stages are the cost of each part.
func init() {
	registerSuite("fence-profile", suite{
		summary: "where a fence's time goes: the generated fence cut short part by part",
		run:     runFenceProfile,
	})
}

// fenceStages name what each stage adds; stage 0 is the plain table (no trigger) and
// the last entry is the registered table with its fence as installed.
var fenceStages = []string{
	"no trigger (plain)",
	"registered: key guard (UPDATE only) + empty SECURITY DEFINER AFTER ROW trigger",
	"+ DECLARE, key read, COPY FREEZE check",
	"+ source refusals (key size; registered values' size and json)",
	"+ the fence's values: version (one random draw), ordinal, fence_id (ordinal + the draw's bits), format-3 message body",
	"+ the fence statement: top-level check, row_version upsert (the live-tuple probe and order check only for a nested or repeated fence), the message with its MAC",
	"+ push_active check (= the generated fence, unmodified)",
	"real fence on t_fenced (registered the same way, as installed)",
}

// fenceCuts are the lines of the rendered fence before which stages 2 to
// len(fenceCuts)+1 return: stage s ends before fenceCuts[s-2]. Stage 1 replaces the
// body by RETURN NULL (no DECLARE initializers); stage len(fenceCuts)+2 is the
// rendered text unmodified. Since issue 7 the reservation write and the message are
// one SQL statement (with the live-tuple probe only on the full check's path), so one
// stage.
var fenceCuts = []string{
	"  -- Source refusals (issue 13)",
	"  -- The fence's values:",
	"  -- Fast path (issue 7)",
	"  -- Under synchro.push (flagged",
}

// stagedFence returns the CREATE OR REPLACE FUNCTION text of stage s (1..len(fenceCuts)+2) from the
// rendered source of a relation's fence.
func stagedFence(src string, s int) (string, error) {
	switch {
	case s == 1:
		head, _, ok := strings.Cut(src, "AS $fence$")
		_, tail, ok2 := strings.Cut(src, "$fence$;")
		if !ok || !ok2 {
			return "", fmt.Errorf("fence template changed: no $fence$ body (update stagedFence in fenceprofile.go)")
		}
		return head + "AS $fence$\nBEGIN\n  RETURN NULL;\nEND\n$fence$;" + tail, nil
	case s >= 2 && s <= len(fenceCuts)+1:
		cut := fenceCuts[s-2]
		if strings.Count(src, cut) != 1 {
			return "", fmt.Errorf("fence template changed: cut point %q of stage %d not found once (update fenceCuts in fenceprofile.go)", cut, s)
		}
		return strings.Replace(src, cut, "  RETURN NULL;\n"+cut, 1), nil
	case s == len(fenceCuts)+2:
		return src, nil
	}
	return "", fmt.Errorf("no staged fence for stage %d", s)
}

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
	if _, err := conn.Exec(ctx, `CREATE SCHEMA bench_profile`); err != nil {
		return "", err
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
			if _, err := conn.Exec(ctx, `SELECT synchro.register_table($1::regclass, $2)`, t, "profile_"+name); err != nil {
				return "", fmt.Errorf("register %s: %w", t, err)
			}
		}
		maintained = append(maintained, t)
	}
	// Registers t_fenced and activates all registrations: every registered table gets
	// its generated fence and key guard, and its preloaded rows their row_version
	// reservations.
	if _, err := conn.Exec(ctx, registerFenced); err != nil {
		return "", fmt.Errorf("register t_fenced: %w", err)
	}
	for s := 1; s < len(fenceStages)-1; s++ {
		var rid int64
		var src string
		if err := conn.QueryRow(ctx, `SELECT relation_id, synchro._fence_source(relation_id) FROM synchro.relation WHERE table_id = $1`,
			"profile_s"+fmt.Sprint(s)).Scan(&rid, &src); err != nil {
			return "", fmt.Errorf("fence source of stage %d: %w", s, err)
		}
		staged, err := stagedFence(src, s)
		if err != nil {
			return "", err
		}
		if _, err := conn.Exec(ctx, staged); err != nil {
			return "", fmt.Errorf("staged fence of stage %d: %w", s, err)
		}
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

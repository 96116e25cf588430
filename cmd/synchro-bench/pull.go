package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The pull suite: the time of a pull page of 1,000 changes with 100k and with
// --pull-effects (10M) effects in the stream (seeded in bulk), and rebuild rows per
// second of a 100k-row scope materialized by the runner's baseline.
func init() {
	registerSuite("pull", suite{
		summary: "pull page of 1,000 at 100k vs 10M effects in the stream; rebuild rows/s of a 100k-row scope",
		run:     runPull,
	})
}

const (
	goalPullRatio  = 1.2     // time@10M / time@100k
	goalRebuildRPS = 50000.0 // rows per second
	rebuildRows    = 100_000
	smallStream    = 100_000
	scopeEffects   = 10_000 // effects of each measured scope
	pullPasses     = 5      // timed passes over a measured scope (after one warm-up)
)

type pullEnv struct {
	conn       *pgx.Conn
	relationID int64
	lsnBase    string // seeded LSN i is lsnBase + 64·i
	hw         string
	cursorA    string
	cursorB    string
}

func runPull(ctx context.Context, b *bench) (string, error) {
	const dbname = "bench_pull"
	conn, url, err := b.newFastDatabase(ctx, dbname)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	// 100k rows of scope owner:r, written before registration (activation gives them
	// versions) so the runner's baseline materializes projection and membership.
	if _, err := conn.Exec(ctx, itemsTable+fmt.Sprintf(
		`INSERT INTO public.items (owner, v, payload) SELECT 'r', g, '%s' FROM generate_series(1, %d) g;`, payload64, rebuildRows)+
		registerItems); err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	fmt.Fprintf(b.stdout, "runner baseline of %d rows ...\n", rebuildRows)
	r, err := startRunner(ctx, b, url, dbname)
	if err != nil {
		return "", err
	}
	if err := waitFor(ctx, 10*time.Minute, 100*time.Millisecond, r.done, baselineDone(ctx, conn)); err != nil {
		_ = r.stop()
		return "", fmt.Errorf("baseline: %w", err)
	}
	if err := r.stop(); err != nil {
		return "", err
	}
	for _, q := range []string{`VACUUM ANALYZE synchro.projection`, `VACUUM ANALYZE synchro.membership`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", err
		}
	}

	// Rebuild of owner:r.
	var sb strings.Builder
	sb.WriteString("### pull: pull page time vs stream length; rebuild rows/s\n\n")
	fmt.Fprintf(&sb, "Fast cluster: %s. Client: one pgx connection on 127.0.0.1 calling the SQL functions; times are client-side "+
		"(call to decoded reply).\n\n", fastSettings(ctx, conn))
	sb.WriteString("#### rebuild of a 100k-row scope\n\n")
	fmt.Fprintf(&sb, "Goal: ≥ %.0f rows/s. %d passes per page size, median.\n\n", goalRebuildRPS, b.cfg.repeat)
	sb.WriteString("| max_rows | pages | rows | median s | rows/s | verdict | per-pass s | load per pass |\n|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, size := range []int{1000, 10000} {
		var secs, loads []float64
		var pages, rows int
		for i := 0; i < b.cfg.repeat; i++ {
			loads = append(loads, loadAvg())
			s, p, n, err := timeRebuild(ctx, conn, "owner:r", size)
			if err != nil {
				return "", err
			}
			if n != rebuildRows {
				return "", fmt.Errorf("rebuild returned %d rows, want %d", n, rebuildRows)
			}
			secs, pages, rows = append(secs, s), p, n
			fmt.Fprintf(b.stdout, "  rebuild max_rows=%d: %d pages, %.2f s, %.0f rows/s (load %.1f)\n", size, p, s, float64(n)/s, loads[i])
		}
		m := median(secs)
		v := "PASS"
		if float64(rows)/m < goalRebuildRPS {
			v = "BELOW-GOAL"
		}
		var per []string
		for _, s := range secs {
			per = append(per, fmt.Sprintf("%.2f", s))
		}
		fmt.Fprintf(&sb, "| %d | %d | %d | %.2f | %.0f | %s | %s | %s |\n", size, pages, rows, m, float64(rows)/m, v,
			strings.Join(per, "/"), fmtLoads(loads))
	}

	// Where rebuild's time goes: the same keyset pages as one set-based SQL statement
	// each (the rows as a JSON array built with jsonb_agg(jsonb_build_object(…)), no
	// checksum chain, no token), for comparison.
	var scanSecs, setSecs, scanLoads []float64
	for i := 0; i < b.cfg.repeat; i++ {
		scanLoads = append(scanLoads, loadAvg())
		s, err := timeSetBasedPages(ctx, conn, "owner:r", 1000, false)
		if err != nil {
			return "", err
		}
		scanSecs = append(scanSecs, s)
		s, err = timeSetBasedPages(ctx, conn, "owner:r", 1000, true)
		if err != nil {
			return "", err
		}
		setSecs = append(setSecs, s)
	}
	fmt.Fprintf(b.stdout, "  keyset pages of 1000 in plain SQL: range scan + join only %.2f s, with JSON %.2f s\n",
		median(scanSecs), median(setSecs))
	fmt.Fprintf(&sb, "\nWhere it goes: the same 100 keyset pages of 1,000 as one plain SQL statement each take "+
		"%.2f s (%.0f rows/s) for the membership ⋈ projection range scan alone (count only) and %.2f s (%.0f rows/s) "+
		"with the rows rendered as a JSON array (`jsonb_agg(jsonb_build_object(…))`) and decoded by the client; no checksum chain, no token "+
		"(load %s).\n", median(scanSecs), float64(rebuildRows)/median(scanSecs), median(setSecs),
		float64(rebuildRows)/median(setSecs), fmtLoads(scanLoads))

	// Pull: seed effects in bulk.
	e := &pullEnv{conn: conn}
	if err := e.prepare(ctx); err != nil {
		return "", err
	}
	total := b.cfg.pullEffects
	fmt.Fprintf(b.stdout, "seeding %d effects (scope owner:a gets every 10th) ...\n", smallStream)
	if err := e.seed(ctx, 1, smallStream, 10, "owner:a"); err != nil {
		return "", err
	}
	size1, err := tableSize(ctx, conn)
	if err != nil {
		return "", err
	}
	a1, err := e.timePull(ctx, b, "owner:a", e.cursorA)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(b.stdout, "seeding up to %d effects (scope owner:b gets every %dth of the new ones) ...\n", total, (total-smallStream)/scopeEffects)
	t0 := time.Now()
	if err := e.seed(ctx, smallStream+1, total, (total-smallStream)/scopeEffects, "owner:b"); err != nil {
		return "", err
	}
	seedSec := time.Since(t0).Seconds()
	size2, err := tableSize(ctx, conn)
	if err != nil {
		return "", err
	}
	a2, err := e.timePull(ctx, b, "owner:a", e.cursorA)
	if err != nil {
		return "", err
	}
	b2, err := e.timePull(ctx, b, "owner:b", e.cursorB)
	if err != nil {
		return "", err
	}

	sb.WriteString("\n#### pull page of 1,000 changes vs stream length\n\n")
	fmt.Fprintf(&sb, "Goal: time@%s / time@100k ≤ %.1f. Effects are seeded in bulk into `synchro.effect` (one effect per "+
		"commit position, 1,000 other scopes; seeding %d effects took %.0f s); `owner:a` has %d effects spread over the "+
		"first 100k (every 10th), `owner:b` has %d spread over the rest (every %dth; a heap page holds about 25 effects). Each cursor comes "+
		"from a real `synchro.rebuild` of its (empty) scope. Per measurement: one first (cold-ish) pass, then %d passes of %d pages; "+
		"median page time.\n\n",
		humanCount(total), goalPullRatio, total, seedSec, scopeEffects, scopeEffects, (total-smallStream)/scopeEffects, pullPasses, scopeEffects/1000)
	sb.WriteString("| effects in stream | effect table + indexes | scope | median ms/page | p90 ms/page | first pass ms/page | ratio to 100k | verdict | load |\n")
	sb.WriteString("|---:|---:|---|---:|---:|---:|---:|---|---|\n")
	row := func(n int, size string, scope string, p pullResult, ratio float64, judge bool) {
		v := ""
		if judge {
			v = "PASS"
			if ratio > goalPullRatio {
				v = "BELOW-GOAL"
			}
		}
		rt := "1.00"
		if ratio > 0 {
			rt = fmt.Sprintf("%.2f", ratio)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %.2f | %.2f | %.2f | %s | %s | %s |\n", humanCount(n), size, scope, p.median, p.p90, p.warm, rt, v, fmtLoads(p.loads))
	}
	row(smallStream, size1, "owner:a", a1, 0, false)
	row(total, size2, "owner:a (same rows)", a2, a2.median/a1.median, true)
	row(total, size2, "owner:b (spread)", b2, b2.median/a1.median, true)
	return sb.String(), nil
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func tableSize(ctx context.Context, conn *pgx.Conn) (string, error) {
	var s string
	err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('synchro.effect'))`).Scan(&s)
	return s, err
}

// timeRebuild pages through a scope's rebuild and returns seconds, pages and rows.
func timeRebuild(ctx context.Context, conn *pgx.Conn, scope string, size int) (float64, int, int, error) {
	var session *string
	pages, rows := 0, 0
	t0 := time.Now()
	for {
		var raw []byte
		if err := conn.QueryRow(ctx, `SELECT synchro.rebuild('bench', $1, $2, $3)`, scope, session, size).Scan(&raw); err != nil {
			return 0, 0, 0, err
		}
		var page struct {
			Session string            `json:"session"`
			Rows    []json.RawMessage `json:"rows"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return 0, 0, 0, err
		}
		pages++
		rows += len(page.Rows)
		if !page.HasMore {
			break
		}
		s := page.Session
		session = &s
	}
	return time.Since(t0).Seconds(), pages, rows, nil
}

// prepare gets the relation, the seeding base position and cursors for the measured
// scopes from real rebuilds (empty scopes: the cursor is at generation_start).
func (e *pullEnv) prepare(ctx context.Context) error {
	if err := e.conn.QueryRow(ctx, `SELECT relation_id FROM synchro.relation WHERE table_id = 'items'`).Scan(&e.relationID); err != nil {
		return err
	}
	if err := e.conn.QueryRow(ctx, `SELECT generation_start_lsn::text FROM synchro.progress`).Scan(&e.lsnBase); err != nil {
		return err
	}
	for _, sc := range []struct {
		scope string
		dst   *string
	}{{"owner:a", &e.cursorA}, {"owner:b", &e.cursorB}} {
		var raw []byte
		if err := e.conn.QueryRow(ctx, `SELECT synchro.rebuild('bench', $1)`, sc.scope).Scan(&raw); err != nil {
			return err
		}
		var page struct {
			Cursor  string `json:"cursor"`
			HasMore bool   `json:"has_more"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return err
		}
		if page.HasMore || page.Cursor == "" {
			return fmt.Errorf("rebuild of %s: no cursor", sc.scope)
		}
		*sc.dst = page.Cursor
	}
	return nil
}

// seed inserts effects from..to (one per commit position lsnBase + 64·i), giving every
// every-th one to scope measured and the others to 1,000 other scopes, with the primary
// key dropped and rebuilt (bulk), then moves the high-watermark above them.
func (e *pullEnv) seed(ctx context.Context, from, to, every int, measured string) error {
	stmts := []string{
		`ALTER TABLE synchro.effect DROP CONSTRAINT effect_pkey`,
		fmt.Sprintf(`INSERT INTO synchro.effect (stream_generation, scope, scope_hash, commit_lsn, event_ordinal, effect_ordinal,
		                                         table_id, relation_id, pk, op, version, image, image_bytes)
		SELECT 1, x.scope, synchro._scope_hash(x.scope), '%s'::pg_lsn + 64 * g::numeric, 0, 0, 'items', %d, g::text, 'upsert',
		       md5(g::text), x.image, octet_length(x.image::text)
		  FROM generate_series(%d, %d) g
		 CROSS JOIN LATERAL (SELECT CASE WHEN g %% %d = 0 THEN %s ELSE 'owner:o' || (g %% 1000) END AS scope,
		       jsonb_build_object('id', g, 'owner', 'o' || (g %% 1000), 'v', g, 'payload', '%s') AS image) x`,
			e.lsnBase, e.relationID, from, to, every, quoteLit(measured), payload64),
		`ALTER TABLE synchro.effect ADD CONSTRAINT effect_pkey PRIMARY KEY (stream_generation, scope_hash, commit_lsn, event_ordinal, effect_ordinal)`,
		`VACUUM ANALYZE synchro.effect`,
		fmt.Sprintf(`UPDATE synchro.progress SET materialized_commit_lsn = '%[1]s'::pg_lsn + 64 * %[2]d::numeric,
		    processed_end_lsn = greatest(processed_end_lsn, '%[1]s'::pg_lsn + 64 * %[2]d::numeric)`, e.lsnBase, to+1),
		`CHECKPOINT`,
	}
	for _, s := range stmts {
		if _, err := e.conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("seed: %w", err)
		}
	}
	return nil
}

func quoteLit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type pullResult struct {
	median, p90, warm float64 // ms per page
	loads             []float64
}

// timePull pages a scope from its cursor to the end, once to warm up and then
// pullPasses times, and returns page times.
func (e *pullEnv) timePull(ctx context.Context, b *bench, scope, cursor string) (pullResult, error) {
	var res pullResult
	var all []float64
	for pass := 0; pass <= pullPasses; pass++ {
		load := loadAvg()
		cur := cursor
		var times []float64
		changes := 0
		for {
			t0 := time.Now()
			var raw []byte
			if err := e.conn.QueryRow(ctx, `SELECT synchro.pull('bench', $1, $2, 1000)`, scope, cur).Scan(&raw); err != nil {
				return res, err
			}
			var page struct {
				Changes []json.RawMessage `json:"changes"`
				Cursor  string            `json:"cursor"`
				HasMore bool              `json:"has_more"`
			}
			if err := json.Unmarshal(raw, &page); err != nil {
				return res, err
			}
			times = append(times, float64(time.Since(t0).Microseconds())/1000)
			changes += len(page.Changes)
			cur = page.Cursor
			if !page.HasMore {
				break
			}
		}
		if changes != scopeEffects {
			return res, fmt.Errorf("pull of %s returned %d changes, want %d", scope, changes, scopeEffects)
		}
		if pass == 0 {
			res.warm = median(times)
			continue
		}
		res.loads = append(res.loads, load)
		all = append(all, times...)
	}
	res.median = median(all)
	res.p90 = percentile(all, 0.9)
	fmt.Fprintf(b.stdout, "  pull %s: median %.2f ms/page, p90 %.2f, warm-up %.2f (load %s)\n", scope, res.median, res.p90, res.warm, fmtLoads(res.loads))
	return res, nil
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// timeSetBasedPages reads a scope's member rows in keyset pages of size with one SQL
// statement per page: with withJSON the page's rows as a JSON array of the objects
// rebuild returns (jsonb_agg of jsonb_build_object), else only the count (the range
// scan and join alone).
func timeSetBasedPages(ctx context.Context, conn *pgx.Conn, scope string, size int, withJSON bool) (float64, error) {
	lastTid, lastOrder, lastPk := "", int64(-1<<63), ""
	agg := `SELECT '[]'::jsonb`
	if withJSON {
		agg = `SELECT coalesce(jsonb_agg(jsonb_build_object('table', table_id,
		           'pk', CASE WHEN key_type = 'string' THEN to_jsonb(pk) ELSE to_jsonb(pk::bigint) END,
		           'version', version, 'row', image)), '[]') FROM page`
	}
	t0 := time.Now()
	rows := 0
	for {
		var n int
		var tid, pk *string
		var ord *int64
		var raw []byte
		err := conn.QueryRow(ctx, `
		  WITH page AS MATERIALIZED (
		    SELECT m.table_id, m.pk_order, m.pk, pr.version, pr.image, r.key_type,
		           row_number() OVER () AS rn
		      FROM synchro.membership m
		      JOIN synchro.projection pr ON pr.relation_id = m.relation_id AND pr.pk = m.pk
		      JOIN synchro.relation r ON r.relation_id = m.relation_id
		     WHERE m.scope = $1
		       AND (m.table_id COLLATE "C", m.pk_order, m.pk COLLATE "C") > ($2 COLLATE "C", $3, $4 COLLATE "C")
		     ORDER BY m.table_id COLLATE "C", m.pk_order, m.pk COLLATE "C"
		     LIMIT $5)
		  SELECT (SELECT count(*)::int FROM page), (`+agg+`),
		         l.table_id, l.pk_order, l.pk
		    FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT * FROM page ORDER BY rn DESC LIMIT 1) l ON true`,
			scope, lastTid, lastOrder, lastPk, size).Scan(&n, &raw, &tid, &ord, &pk)
		if err != nil {
			return 0, err
		}
		if withJSON {
			var arr []json.RawMessage
			if err := json.Unmarshal(raw, &arr); err != nil {
				return 0, err
			}
			if len(arr) != n {
				return 0, fmt.Errorf("set-based page: %d rows, count %d", len(arr), n)
			}
		}
		rows += n
		if n < size {
			break
		}
		lastTid, lastOrder, lastPk = *tid, *ord, *pk
	}
	if rows != rebuildRows {
		return 0, fmt.Errorf("set-based pages returned %d rows", rows)
	}
	return time.Since(t0).Seconds(), nil
}

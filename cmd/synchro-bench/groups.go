package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The groups suite (issue 11): changes per second delivered to one consumer group
// reading a backlog of --groups-txns single-row source transactions (the runner
// materializes them for real), against pull of the same changes from the one scope
// they all belong to, same run, same connection.
func init() {
	registerSuite("groups", suite{
		summary: "consumer group: changes/s reading a backlog of --groups-txns transactions vs pull of the same changes",
		run:     runGroups,
	})
}

func runGroups(ctx context.Context, b *bench) (string, error) {
	const dbname = "bench_groups"
	n := b.cfg.groupsTxns
	conn, url, err := b.newFastDatabase(ctx, dbname)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, itemsTable+registerItems); err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	r, err := startRunner(ctx, b, url, dbname)
	if err != nil {
		return "", err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = r.stop()
		}
	}()
	if err := waitFor(ctx, 10*time.Minute, 100*time.Millisecond, r.done, baselineDone(ctx, conn)); err != nil {
		return "", fmt.Errorf("baseline: %w", err)
	}
	// The pull side's start: the (empty) scope's rebuild cursor, before the backlog.
	var raw []byte
	if err := conn.QueryRow(ctx, `SELECT synchro.rebuild('bench', 'owner:g')`).Scan(&raw); err != nil {
		return "", err
	}
	var rb struct {
		Cursor string `json:"cursor"`
	}
	if err := json.Unmarshal(raw, &rb); err != nil || rb.Cursor == "" {
		return "", fmt.Errorf("rebuild: no cursor (%v)", err)
	}

	// The backlog: n source transactions of one row each, all in scope owner:g.
	fmt.Fprintf(b.stdout, "writing and materializing %d single-row transactions ...\n", n)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
		FOR i IN 1..%d LOOP
		  INSERT INTO public.items (owner, v, payload) VALUES ('g', i, '%s');
		  COMMIT;
		END LOOP; END $$`, n, payload64)); err != nil {
		return "", fmt.Errorf("backlog: %w", err)
	}
	if err := waitFor(ctx, 30*time.Minute, 200*time.Millisecond, r.done, func() (bool, error) {
		var got int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM synchro.txn`).Scan(&got)
		return got >= n, err
	}); err != nil {
		return "", fmt.Errorf("materialize: %w", err)
	}
	stopped = true
	if err := r.stop(); err != nil {
		return "", err
	}
	for _, q := range []string{`VACUUM ANALYZE synchro.change`, `VACUUM ANALYZE synchro.effect`, `CHECKPOINT`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", err
		}
	}

	var groupSecs, pullSecs, loads []float64
	for i := 0; i <= b.cfg.repeat; i++ { // pass 0 warms up
		load := loadAvg()
		gs, err := timeGroupRead(ctx, conn, fmt.Sprintf("bench_%d", i), n)
		if err != nil {
			return "", err
		}
		ps, err := timePullAll(ctx, conn, rb.Cursor, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(b.stdout, "  pass %d: group %.2f s (%.0f changes/s), pull %.2f s (%.0f changes/s) (load %.1f)\n",
			i, gs, float64(n)/gs, ps, float64(n)/ps, load)
		if i == 0 {
			continue
		}
		groupSecs, pullSecs, loads = append(groupSecs, gs), append(pullSecs, ps), append(loads, load)
	}
	g, p := median(groupSecs), median(pullSecs)
	var sb strings.Builder
	sb.WriteString("### groups: consumer group read vs pull of the same changes\n\n")
	fmt.Fprintf(&sb, "Fast cluster: %s. A backlog of %d single-row source transactions, written one commit each "+
		"and materialized by the runner (stopped before timing), all in scope `owner:g`. Client: one pgx connection "+
		"on 127.0.0.1; times are client-side, JSON decoded. Group: a new group at `earliest` per pass, "+
		"`read_changes(max_transactions 1000, max_bytes 8 MiB)` then `ack` of the last position until `has_more` is "+
		"false. Pull: the scope's rebuild cursor taken before the backlog, pages of 1,000 until `has_more` is false. "+
		"%d passes after one warm-up, median.\n\n", fastSettings(ctx, conn), n, b.cfg.repeat)
	sb.WriteString("| changes | group s | group changes/s | pull s | pull changes/s | group / pull | load per pass |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---|\n")
	fmt.Fprintf(&sb, "| %d | %.2f | %.0f | %.2f | %.0f | %.2f | %s |\n", n, g, float64(n)/g, p, float64(n)/p, p/g, fmtLoads(loads))
	return sb.String(), nil
}

// timeGroupRead creates group name at earliest and reads and acknowledges every
// transaction; the time of the reads and acks.
func timeGroupRead(ctx context.Context, conn *pgx.Conn, name string, want int) (float64, error) {
	if _, err := conn.Exec(ctx, `SELECT synchro.create_consumer_group($1)`, name); err != nil {
		return 0, err
	}
	var tok int64
	if err := conn.QueryRow(ctx, `SELECT synchro.acquire_lease($1, 'bench', 600)`, name).Scan(&tok); err != nil {
		return 0, err
	}
	t0 := time.Now()
	changes := 0
	for {
		var raw []byte
		if err := conn.QueryRow(ctx, `SELECT synchro.read_changes($1, $2, 1000, 8388608)`, name, tok).Scan(&raw); err != nil {
			return 0, err
		}
		var page struct {
			Transactions []struct {
				Position string            `json:"position"`
				Changes  []json.RawMessage `json:"changes"`
			} `json:"transactions"`
			HasMore bool `json:"has_more"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return 0, err
		}
		for _, x := range page.Transactions {
			changes += len(x.Changes)
		}
		if len(page.Transactions) > 0 {
			last := page.Transactions[len(page.Transactions)-1].Position
			if _, err := conn.Exec(ctx, `SELECT synchro.ack($1, $2, $3)`, name, tok, last); err != nil {
				return 0, err
			}
		}
		if !page.HasMore {
			break
		}
	}
	secs := time.Since(t0).Seconds()
	if changes != want {
		return 0, fmt.Errorf("group %s read %d changes, want %d", name, changes, want)
	}
	return secs, nil
}

// timePullAll pulls scope owner:g from cursor to the end in pages of 1,000.
func timePullAll(ctx context.Context, conn *pgx.Conn, cursor string, want int) (float64, error) {
	t0 := time.Now()
	changes := 0
	cur := cursor
	for {
		var raw []byte
		if err := conn.QueryRow(ctx, `SELECT synchro.pull('bench', 'owner:g', $1, 1000)`, cur).Scan(&raw); err != nil {
			return 0, err
		}
		var page struct {
			Changes []json.RawMessage `json:"changes"`
			Cursor  string            `json:"cursor"`
			HasMore bool              `json:"has_more"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			return 0, err
		}
		changes += len(page.Changes)
		cur = page.Cursor
		if !page.HasMore {
			break
		}
	}
	secs := time.Since(t0).Seconds()
	if changes != want {
		return 0, fmt.Errorf("pull returned %d changes, want %d", changes, want)
	}
	return secs, nil
}

package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// The ledger suite: what the replay ledger's unique index on fence_id costs a
// materialization once the ledger is large, with the fence ids of the fence until
// 2026-12-02 (random UUIDv4s) against today's (a UUIDv8 in allocation order,
// sql/functions/_fence_source.sql), in the same run on the durable cluster
// (full_page_writes on, as in production).
//
// Two copies of synchro.event (LIKE ... INCLUDING ALL: its primary key and the unique
// fence_id index) are filled with --ledger-rows events, then checkpointed; each then
// takes the same 20 materialization-sized inserts of 1,000 events. The random ids send
// every insert to a random leaf of the fence_id index: more page reads and splits, and,
// after a checkpoint, a full-page image in the WAL for every leaf touched the first
// time. Ordered ids append at the index's right edge, like the ledger's primary key.
// The suite prints WAL bytes and milliseconds per 1,000 events of both, and their
// ratios.
func init() {
	registerSuite("ledger", suite{
		summary: "the replay ledger's fence_id index on a large ledger: random fence ids (the fence until 2026-12-02) vs ids in allocation order, WAL and time per materialized event",
		run:     runLedger,
	})
}

// ledgerIDs are the two fence-id layouts, as SQL expressions of the event's ordinal g.
// ordered is the fence's layout (sql/functions/_fence_source.sql: the ordinal as 12
// hex digits, version 8, then 74 random bits of a UUIDv4 draw; tests/fence_test.go pins
// the fence to it), from one gap-free series: one writer's ids, the best case (many
// writing sessions insert at one point per session's block of cached ordinals).
var ledgerIDs = []struct{ name, expr string }{
	{"random (UUIDv4)", `gen_random_uuid()`},
	{"ordered (UUIDv8, ordinal)", `(lpad(to_hex(g), 12, '0') || '8' || substr(replace(gen_random_uuid()::text, '-', ''), 14))::uuid`},
}

func runLedger(ctx context.Context, b *bench) (string, error) {
	conn, err := b.newDatabase(ctx, "bench_ledger")
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	rows := b.cfg.ledgerRows
	const batches, perBatch = 20, 1000
	fill := func(tbl, expr string, from, to int) error {
		// The columns of a 1,000-row source transaction's events: commit_lsn per
		// transaction of 1,000, event_ordinal within it, a random version.
		q := fmt.Sprintf(`INSERT INTO %s (stream_generation, commit_lsn, event_ordinal, relation_id, op, pk, version,
		                                    fence_id, registry_generation)
		  SELECT 1, ('0/' || to_hex(g / 1000 * 4096 + 4096))::pg_lsn, g %% 1000, 1, 'insert', g::text,
		         replace(gen_random_uuid()::text, '-', ''), %s, 1
		    FROM generate_series($1::int8, $2::int8) g`, tbl, expr)
		_, err := conn.Exec(ctx, q, from, to)
		return err
	}
	type result struct {
		walBytes int64
		dur      time.Duration
		idxMB    float64
	}
	res := make([]result, len(ledgerIDs))
	for i, l := range ledgerIDs {
		tbl := fmt.Sprintf("ledger_%d", i)
		if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE synchro.event INCLUDING ALL)`, tbl)); err != nil {
			return "", err
		}
		fmt.Fprintf(b.stdout, "  filling %s with %d events (%s fence ids) ...\n", tbl, rows, l.name)
		for from := 0; from < rows; from += 500_000 {
			if err := fill(tbl, l.expr, from, min(from+500_000, rows)-1); err != nil {
				return "", err
			}
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return "", err
	}
	// Alternate the two tables batch by batch, each first in every other batch, so both
	// see the same machine.
	for k := 0; k < batches; k++ {
		for j := range ledgerIDs {
			i := (j + k) % len(ledgerIDs)
			l := ledgerIDs[i]
			tbl := fmt.Sprintf("ledger_%d", i)
			var before string
			if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
				return "", err
			}
			from := rows + k*perBatch
			t0 := time.Now()
			if err := fill(tbl, l.expr, from, from+perBatch-1); err != nil {
				return "", err
			}
			res[i].dur += time.Since(t0)
			var wal int64
			if err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::int8`, before).Scan(&wal); err != nil {
				return "", err
			}
			res[i].walBytes += wal
		}
	}
	for i := range ledgerIDs {
		var idx int64
		if err := conn.QueryRow(ctx, `SELECT pg_relation_size(i.indexrelid) FROM pg_index i
		   JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = $1::regclass AND c.relname LIKE '%fence_id%'`,
			fmt.Sprintf("ledger_%d", i)).Scan(&idx); err != nil {
			return "", fmt.Errorf("fence_id index size: %w", err)
		}
		res[i].idxMB = float64(idx) / (1 << 20)
	}

	var sb strings.Builder
	sb.WriteString("\n### ledger: the fence_id index on a large ledger\n\n")
	fmt.Fprintf(&sb, "Durable cluster (full_page_writes on). Two copies of synchro.event with %d events each, "+
		"checkpointed; then %d inserts of %d events into each, alternated (%d events each). Per 1,000 events:\n\n",
		rows, batches, perBatch, batches*perBatch)
	sb.WriteString("| fence ids | WAL KB | ms | fence_id index MB |\n|---|---:|---:|---:|\n")
	per := float64(batches*perBatch) / 1000
	for i, l := range ledgerIDs {
		fmt.Fprintf(&sb, "| %s | %.0f | %.1f | %.0f |\n", l.name, float64(res[i].walBytes)/1024/per,
			float64(res[i].dur.Microseconds())/1000/per, res[i].idxMB)
	}
	walRatio := float64(res[1].walBytes) / float64(max(res[0].walBytes, 1))
	timeRatio := float64(res[1].dur) / float64(max(res[0].dur, 1))
	fmt.Fprintf(&sb, "\nordered/random: WAL %.3f, time %.3f\n", walRatio, timeRatio)
	fmt.Fprintf(b.stdout, "  ordered/random: WAL %.3f, time %.3f\n", walRatio, timeRatio)
	return sb.String(), nil
}

package tests

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestZZLagDebug(t *testing.T) {
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	defer func() { _ = rr.stop(t) }()
	waitStream(t, db)
	ctx := context.Background()
	for i := 0; i < 15; i++ {
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, 1000+i)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	rows, err := db.Pool.Query(ctx, `SELECT extract(epoch from materialized_at - commit_time)*1000 FROM synchro.txn ORDER BY commit_lsn`)
	require.NoError(t, err)
	for rows.Next() {
		var ms float64
		require.NoError(t, rows.Scan(&ms))
		fmt.Printf("commit→materialization start: %.1f ms\n", ms)
	}
}

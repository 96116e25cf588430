package pgcluster_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/pgcluster"
)

func TestStartRestartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Logger: nil})
	require.NoError(t, err)
	dir := c.Dir()
	t.Cleanup(func() { _ = c.Stop() })

	query := func(sql string) string {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		defer conn.Close(ctx)
		var v string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&v))
		return v
	}
	require.Equal(t, "logical", query("SHOW wal_level"))
	require.Equal(t, "on", query("SHOW synchronous_commit"))
	require.Equal(t, "off", query("SHOW fsync"))

	require.NoError(t, c.StopImmediate())
	require.NoError(t, c.Restart(ctx))
	require.Equal(t, "100", query("SHOW max_replication_slots"))

	require.NoError(t, c.Stop())
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "temp dir removed")
}

func TestReuseDir(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Not t.TempDir: its parents are 0700, and as root the cluster runs as postgres.
	dir, err := os.MkdirTemp("", "pgcluster-reuse-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var c *pgcluster.Cluster
	c, err = pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Durable: true,
		ExtraConf: map[string]string{"application_name": "it's"}})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE kept")
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, c.Stop())

	c, err = pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	conn, err = pgx.Connect(ctx, c.URL("kept"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))
}

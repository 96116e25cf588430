package pgcluster_test

import (
	"context"
	"net"
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

// A port chosen free can be taken before the postmaster binds it (another test's
// cluster, another process): the start is retried on another port. Here the first
// port offered is held by a listener for the whole start.
func TestStartRetriesATakenPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	var offered []int
	pick := func() (int, error) {
		if len(offered) == 0 {
			offered = append(offered, held.Addr().(*net.TCPAddr).Port)
			return offered[0], nil
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		offered = append(offered, l.Addr().(*net.TCPAddr).Port)
		return offered[len(offered)-1], nil
	}
	c, err := pgcluster.StartWith(ctx, pgcluster.Options{}, pick)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop() })
	require.Len(t, offered, 2, "one retry after the taken port")
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	// An explicit port is not replaced.
	_, err = pgcluster.Start(ctx, pgcluster.Options{Port: held.Addr().(*net.TCPAddr).Port})
	require.ErrorContains(t, err, "Address already in use")
}

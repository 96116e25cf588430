// Package restore holds the test that restores a physical backup of a running Synchro
// database into a second cluster (docs/runbook.md, "Restore from backup"). It starts
// that cluster itself, so it has a package of its own.
package restore

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
	"github.com/synchro/synchro/tests/testkit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type check struct {
	name, detail string
	ok           bool
}

func readiness(t *testing.T, pool *pgxpool.Pool) (map[string]check, bool) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT check_name, ok, detail FROM synchro.readiness()`)
	require.NoError(t, err)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (check, error) {
		var c check
		return c, r.Scan(&c.name, &c.ok, &c.detail)
	})
	require.NoError(t, err)
	require.Len(t, list, 11)
	out := map[string]check{}
	for _, c := range list {
		out[c.name] = c
	}
	var ready bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ready))
	return out, ready
}

// A physical backup (pg_basebackup, what base backups and point-in-time recovery
// restore) holds the database with its relation OIDs but no replication slot: the
// restored database must read not ready, with slot failing, and a runner started on it
// must refuse the missing slot as a fatal state instead of creating a new stream
// silently.
func TestRestoredBackupIsNotReady(t *testing.T) {
	t.Parallel()
	cluster := testdb.Cluster()
	if cluster == nil {
		t.Skip("needs the private cluster to back up (not " + testdb.EnvDatabaseURL + ")")
	}
	bin := os.Getenv("SYNCHRO_PG_BIN")
	if bin == "" {
		bin = pgcluster.DefaultBinDir
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_basebackup")); err != nil {
		// pg_basebackup must not be older than the server, so another major's will not do.
		t.Skipf("needs pg_basebackup beside the server binaries in %s (the PostgreSQL 16-18 packages of make test-matrix ship only initdb, pg_ctl and postgres)", bin)
	}
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO items VALUES (1, 'a');`)
	require.NoError(t, err)
	slot := testkit.SlotName(db.Name)
	logs := &testkit.SyncLog{}
	cfg := runner.Config{
		DatabaseURL: db.URL, Slot: slot, Owner: "test",
		HeartbeatInterval: 250 * time.Millisecond, StandbyInterval: time.Second, IdleInterval: 100 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, BackoffMin: 20 * time.Millisecond, BackoffMax: 300 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}

	// A healthy stream: ready, with a write materialized.
	r, err := runner.New(cfg)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	_, err = db.Pool.Exec(ctx, `INSERT INTO items VALUES (2, 'a')`)
	require.NoError(t, err)
	testkit.WaitFor(t, 30*time.Second, 20*time.Millisecond, "the source database to be ready", func() bool {
		_, ready := readiness(t, db.Pool)
		return ready
	})

	// The backup, taken while the runner streams.
	dir, err := os.MkdirTemp("", "synchro-restore-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_basebackup"),
		"--dbname", cluster.URL("postgres"), "--pgdata", filepath.Join(dir, "data"),
		"--wal-method", "stream", "--checkpoint", "fast", "--no-sync").CombinedOutput()
	require.NoError(t, err, "pg_basebackup: %s", out)

	// Restored: a second cluster from the backup.
	restored, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = restored.Stop() })
	url := restored.URL(db.Name)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	var slots int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots))
	require.Zero(t, slots, "a backup holds no replication slot")
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&rows))
	require.Equal(t, 2, rows, "the restored database holds the data")

	checks, ready := readiness(t, pool)
	for _, name := range []string{"database", "worker", "heartbeat", "registry", "triggers", "publication",
		"slot", "poison", "progress", "wal_lag", "commit_lag"} {
		t.Logf("restored: %-11s ok=%-5t %s", name, checks[name].ok, checks[name].detail)
	}
	require.False(t, ready)
	require.False(t, checks["slot"].ok)
	require.Equal(t, "slot missing", checks["slot"].detail)
	require.False(t, checks["worker"].ok, "no runner is attached to the restored database")
	for _, name := range []string{"registry", "triggers", "publication", "poison"} {
		require.True(t, checks[name].ok, "%s: %s (a physical restore keeps relation OIDs)", name, checks[name].detail)
	}

	// A runner on the restored database stops at once: the stream's slot is missing, a
	// fatal state. It creates no slot and no new stream behind the operator's back.
	rlogs := &testkit.SyncLog{}
	rcfg := cfg
	rcfg.DatabaseURL = url
	rcfg.Logger = slog.New(slog.NewTextHandler(rlogs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr, err := runner.New(rcfg)
	require.NoError(t, err)
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	err = rr.Run(sctx)
	require.Error(t, err)
	require.True(t, runner.IsFatal(err), "%v", err)
	require.ErrorContains(t, err, "replication slot of the stream is missing")
	require.Contains(t, rlogs.String(), "fatal state")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots))
	require.Zero(t, slots, "the runner created no slot")
	checks, ready = readiness(t, pool)
	require.False(t, ready)
	require.Equal(t, "slot missing", checks["slot"].detail)
}

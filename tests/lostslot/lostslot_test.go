// Package lostslot holds the test that makes the stream's slot lose its WAL. It sets
// max_slot_wal_keep_size, a server-wide setting, so it has a package (and a private
// cluster) of its own.
package lostslot

import (
	"context"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
	"github.com/synchro/synchro/tests/testkit"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// runFor runs a runner until it returns or ctx ends.
func runFor(ctx context.Context, t *testing.T, cfg runner.Config) <-chan error {
	t.Helper()
	r, err := runner.New(cfg)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return done
}

// A slot whose WAL was removed (max_slot_wal_keep_size exceeded while the runner was
// down) is a fatal state: the runner stops at start with one log line naming it, and
// readiness's slot check reports wal_status=lost.
func TestLostSlotIsFatal(t *testing.T) {
	t.Parallel()
	if testdb.Cluster() == nil {
		t.Skip("max_slot_wal_keep_size is server-wide: needs the private cluster (not " + testdb.EnvDatabaseURL + ")")
	}
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, note text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
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

	// A stream, then the runner stops.
	rctx, cancel := context.WithCancel(ctx)
	done := runFor(rctx, t, cfg)
	testkit.WaitFor(t, 20*time.Second, 20*time.Millisecond, "the stream", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.runner WHERE state = 'streaming'`).Scan(&n))
		return n == 1
	})
	cancel()
	require.NoError(t, <-done)

	// The server may now remove WAL the slot still needs.
	_, err = db.Pool.Exec(ctx, `ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `ALTER SYSTEM RESET max_slot_wal_keep_size`)
		_, _ = db.Pool.Exec(context.Background(), `SELECT pg_reload_conf()`)
	})
	_, err = db.Pool.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	// Readiness's slot row reports the retained WAL against the new bound (issue 12
	// item 4); sessions read the reloaded setting at their next command.
	retained := regexp.MustCompile(`retained_wal_bytes=[0-9]+ max_slot_wal_keep_bytes=1048576 safe_wal_bytes=`)
	testkit.WaitFor(t, 30*time.Second, 20*time.Millisecond, "the slot row to report max_slot_wal_keep_size", func() bool {
		var detail string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT detail FROM synchro.readiness() WHERE check_name = 'slot'`).Scan(&detail))
		return retained.MatchString(detail)
	})
	id := 0
	testkit.WaitFor(t, 60*time.Second, 20*time.Millisecond, "wal_status = lost", func() bool {
		id++
		_, err := db.Pool.Exec(ctx, `INSERT INTO items (id, owner, note) SELECT g, 'a', repeat('x', 500)
			FROM generate_series($1::int8 * 10000, $1::int8 * 10000 + 2000) g`, id)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `SELECT pg_switch_wal()`)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `CHECKPOINT`)
		require.NoError(t, err)
		var status string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&status))
		return status == "lost"
	})

	err = <-runFor(ctx, t, cfg)
	require.ErrorContains(t, err, "wal_status=lost")
	fatal := logs.Lines("fatal state")
	require.Len(t, fatal, 1, "one log line names the fatal state")
	require.Contains(t, fatal[0], "wal_status=lost")

	var ok bool
	var detail string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT ok, detail FROM synchro.readiness() WHERE check_name = 'slot'`).Scan(&ok, &detail))
	require.False(t, ok)
	require.Contains(t, detail, "wal_status=lost")
	var ready bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ready))
	require.False(t, ready)
}

package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Readiness (CONTRACT.md "Readiness", docs/sql/readiness.md): every test breaks one
// condition for real and sees ready() false with that check failing.

var readinessChecks = []string{"database", "worker", "heartbeat", "registry", "triggers", "publication",
	"slot", "poison", "progress", "wal_lag", "commit_lag"}

type readinessRow struct {
	Name   string
	OK     bool
	Detail string
}

// readinessOf is synchro.readiness() and synchro.ready(), read as synchro_app.
func readinessOf(t *testing.T, db *testdb.DB) ([]readinessRow, bool) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL ROLE synchro_app`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, `SELECT check_name, ok, detail FROM synchro.readiness()`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readinessRow, error) {
		var x readinessRow
		return x, r.Scan(&x.Name, &x.OK, &x.Detail)
	})
	require.NoError(t, err)
	names := make([]string, len(out))
	for i, r := range out {
		names[i] = r.Name
	}
	require.Equal(t, readinessChecks, names, "the eleven checks, in the contract's order")
	var ready bool
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ready))
	return out, ready
}

func failingChecks(rows []readinessRow) []string {
	out := []string{}
	for _, r := range rows {
		if !r.OK {
			out = append(out, r.Name)
		}
	}
	return out
}

func checkRow(rows []readinessRow, name string) readinessRow {
	for _, r := range rows {
		if r.Name == name {
			return r
		}
	}
	return readinessRow{}
}

func readinessString(rows []readinessRow) string {
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.Name)
		if r.OK {
			b.WriteString(" ok: ")
		} else {
			b.WriteString(" FAIL: ")
		}
		b.WriteString(r.Detail)
		b.WriteString("\n")
	}
	return b.String()
}

// waitReady waits until ready() is true (and every row ok).
func waitReady(t *testing.T, db *testdb.DB) []readinessRow {
	t.Helper()
	var rows []readinessRow
	deadline := time.Now().Add(15 * time.Second)
	for {
		var ready bool
		rows, ready = readinessOf(t, db)
		if ready && len(failingChecks(rows)) == 0 {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready:\n%s", readinessString(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFailing waits until ready() is false with check failing, and returns the table.
func waitFailing(t *testing.T, db *testdb.DB, check string) []readinessRow {
	t.Helper()
	var rows []readinessRow
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ready bool
		rows, ready = readinessOf(t, db)
		if !ready && !checkRow(rows, check).OK {
			t.Logf("readiness:\n%s", readinessString(rows))
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %s did not fail:\n%s", check, readinessString(rows))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readySystem is a registered table with a running runner, ready.
func readySystem(t *testing.T) (*testdb.DB, *runningRunner) {
	t.Helper()
	db := runnerSetup(t)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	waitReady(t, db)
	return db, rr
}

func TestReadinessBeforeRunner(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	rows, ready := readinessOf(t, db)
	require.False(t, ready)
	for _, name := range []string{"database", "worker", "heartbeat", "slot", "progress", "wal_lag", "commit_lag"} {
		require.False(t, checkRow(rows, name).OK, "%s before any runner:\n%s", name, readinessString(rows))
	}
	for _, name := range []string{"registry", "triggers", "publication", "poison"} {
		require.True(t, checkRow(rows, name).OK, "%s before any runner:\n%s", name, readinessString(rows))
	}
	require.Equal(t, "no runner has started", checkRow(rows, "worker").Detail)
}

// A healthy system is ready within seconds of the runner's start, and stays ready
// while it works.
func TestReadinessHealthy(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, `INSERT INTO items (id, owner, note) VALUES (3, 'a', 'secret-note-value')`)
	waitEffects(t, db, 1)
	rows := waitReady(t, db)
	t.Logf("readiness:\n%s", readinessString(rows))
	for _, r := range rows {
		require.NotContains(t, r.Detail, "secret-note-value")
	}
}

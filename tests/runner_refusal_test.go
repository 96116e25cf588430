package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// adminExec runs sql on the server's maintenance database as its superuser: for
// what a test database's own sessions cannot do while it refuses them.
func adminExec(t *testing.T, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	require.NoError(t, err)
}

// runnerLogin creates a LOGIN REPLICATION role in synchro_runner (superusers are
// exempt from connection limits, so the test's own role cannot stand for the
// runner's) and returns db's URL with it. The role is dropped when the test ends.
func runnerLogin(t *testing.T, db *testdb.DB) (role, dbURL string) {
	t.Helper()
	role = "runner_" + randomSuffix()
	ident := pgx.Identifier{role}.Sanitize()
	mustExec(t, db, `CREATE ROLE `+ident+` LOGIN REPLICATION IN ROLE synchro_runner`)
	t.Cleanup(func() { adminExec(t, `DROP ROLE IF EXISTS `+ident) })
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	return role, u.String()
}

// terminateBackends ends the sessions of database name that match the role ("" for
// every role) from the maintenance database, and waits until none is left.
func terminateBackends(t *testing.T, name, role string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	const match = `datname = $1 AND ($2 = '' OR usename = $2) AND pid <> pg_backend_pid()`
	_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE `+match, name, role)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the terminated sessions to end", func() bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE `+match, name, role).Scan(&n))
		return n == 0
	})
}

// insertEffects counts the insert effects of each of the ids (every items row has one
// scope, so exactly once is one effect per id).
func insertEffects(t *testing.T, db *testdb.DB, from, to int) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT e.pk, count(*)::int FROM synchro.effect e
		WHERE e.op = 'upsert' AND e.pk::int8 BETWEEN $1 AND $2 GROUP BY e.pk`, from, to)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var pk string
		var n int
		require.NoError(t, rows.Scan(&pk, &n))
		out[pk] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// requireExactlyOnce waits until ids from..to are each pull-visible exactly once.
func requireExactlyOnce(t *testing.T, db *testdb.DB, from, to int) {
	t.Helper()
	var got map[string]int
	eventually(t, 90*time.Second, fmt.Sprintf("rows %d..%d pull-visible", from, to), func() bool {
		got = insertEffects(t, db, from, to)
		return len(got) == to-from+1
	})
	for pk, n := range got {
		require.Equal(t, 1, n, "row %s materialized %d times", pk, n)
	}
}

// A database that refuses new sessions for a while (at the runner's start, then
// while it streams), the way an operator makes it
// (ALTER DATABASE ... ALLOW_CONNECTIONS false: SQLSTATE 55000 at connect; a role's
// CONNECTION LIMIT: 53300), with every session of the runner terminated (57P01), is
// waited out: the same `synchro run` process retries with its bounded backoff, counts
// the retries, reconnects when sessions are allowed again and materializes the writes
// committed before and after exactly once. A role that may no longer log in (28000)
// is not waited for: the process exits with a fatal error naming the SQLSTATE. Red
// when a refusal at reconnect is not retried (the process exits) or a fatal one is.
func TestRunnerWaitsOutRefusedConnections(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t)
	db := runnerSetup(t)
	role, dbURL := runnerLogin(t, db)
	dbIdent := pgx.Identifier{db.Name}.Sanitize()
	roleIdent := pgx.Identifier{role}.Sanitize()
	t.Cleanup(func() { adminExec(t, `ALTER DATABASE `+dbIdent+` ALLOW_CONNECTIONS true`) })

	// Refused from the start: the first claim waits too.
	adminExec(t, `ALTER DATABASE `+dbIdent+` ALLOW_CONNECTIONS false`)
	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: dbURL, Slot: runnerSlot(db)})
	eventually(t, 60*time.Second, "two refused first claims", func() bool {
		return strings.Count(p.Logs(), "SQLSTATE 55000") >= 2 || p.Exited()
	})
	require.False(t, p.Exited(), "the runner gave up on its first claim (%s):\n%s", p.Exit(), p.Logs())
	adminExec(t, `ALTER DATABASE `+dbIdent+` ALLOW_CONNECTIONS true`)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
	requireExactlyOnce(t, db, 10, 10)
	pid := p.PID()
	transient := func() float64 { v, _ := p.Metric("synchro_runner_transient_errors_total"); return v }
	reconnects := func() float64 { v, _ := p.Metric("synchro_runner_reconnects_total"); return v }

	refusals := []struct {
		sqlstate       string
		refuse, allow  string
		terminateRole  string
		firstID, endID int
	}{
		{"55000", `ALTER DATABASE ` + dbIdent + ` ALLOW_CONNECTIONS false`,
			`ALTER DATABASE ` + dbIdent + ` ALLOW_CONNECTIONS true`, "", 100, 199},
		{"53300", `ALTER ROLE ` + roleIdent + ` CONNECTION LIMIT 0`,
			`ALTER ROLE ` + roleIdent + ` CONNECTION LIMIT -1`, role, 200, 299},
	}
	for _, rf := range refusals {
		before, beforeReconnects := transient(), reconnects()
		logged := strings.Count(p.Logs(), "SQLSTATE "+rf.sqlstate)
		// Committed, not yet (all) materialized when the sessions go.
		mustExec(t, db, `INSERT INTO items (id, owner) SELECT g, 'o' || g % 3 FROM generate_series($1::int8, $2::int8 - 50) g`,
			rf.firstID, rf.endID)
		adminExec(t, rf.refuse)
		terminateBackends(t, db.Name, rf.terminateRole)
		eventually(t, 60*time.Second, "three refused reconnects, each logged with "+rf.sqlstate, func() bool {
			return strings.Count(p.Logs(), "SQLSTATE "+rf.sqlstate) >= logged+3 || p.Exited()
		})
		time.Sleep(time.Second) // refused for a while longer
		require.False(t, p.Exited(), "the runner gave up on SQLSTATE %s (%s):\n%s", rf.sqlstate, p.Exit(), p.Logs())
		code, _ := p.Get("/livez")
		require.Equal(t, http.StatusOK, code, "a runner waiting out a refusal is alive")
		require.Greater(t, transient(), before, "the refused reconnects are counted")

		adminExec(t, rf.allow)
		mustExec(t, db, `INSERT INTO items (id, owner) SELECT g, 'o' || g % 3 FROM generate_series($1::int8 - 49, $1::int8) g`,
			rf.endID)
		requireExactlyOnce(t, db, rf.firstID, rf.endID)
		require.Equal(t, pid, p.PID())
		require.False(t, p.Exited(), "exit: %s", p.Exit())
		eventually(t, 30*time.Second, "the reconnect counted", func() bool { return reconnects() > beforeReconnects })
		eventually(t, 60*time.Second, "/readyz 200 again", func() bool {
			code, _ := p.Get("/readyz")
			return code == http.StatusOK
		})
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '10'`), "row 10 once")

	// A role that may no longer log in is an operator's decision, not a passing state.
	adminExec(t, `ALTER ROLE `+roleIdent+` NOLOGIN`)
	terminateBackends(t, db.Name, role)
	require.True(t, p.Wait(60*time.Second), "the runner retried a refusal that waiting does not fix:\n%s", p.Logs())
	require.False(t, p.Killed())
	require.Contains(t, p.Exit(), "exit status 1")
	logs := p.Logs()
	require.Contains(t, logs, "SQLSTATE 28000")
	require.Equal(t, 1, strings.Count(logs, "fatal state"), "one line names the fatal state:\n%s", logs)
}

// A refusal that waiting does not fix, at the first claim (the database does not
// exist: 3D000), stops the runner at once with a fatal error naming the SQLSTATE, in
// one log line, instead of a retry loop that only looks alive. Red when a refusal
// of the startup exchange is retried whatever its SQLSTATE.
func TestRunnerFatalRefusalAtStart(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	cfg := testRunnerConfig(t, db)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.Path = "/no_such_database_" + randomSuffix()
	cfg.DatabaseURL = u.String()
	err, logs := fatalRunner(t, cfg)
	require.ErrorContains(t, err, "SQLSTATE 3D000")
	require.Len(t, logs.lines("fatal state"), 1, "one log line names the fatal state")
	require.Empty(t, logs.lines("retrying"), "a fatal refusal is not retried")
}

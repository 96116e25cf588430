package tests

// A review of this session's own changes (2026-12-04): one bug fixed (red before its
// fix), the scenarios it found sound.

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/tests/testdb"
)

// TestFollowupEdgeDevDirReusedAfterCrash: a cluster directory (synchro dev --dir) whose
// server died without a clean shutdown (kill -9, OOM killer, power loss) still holds the
// server's Unix socket and its lock file (the socket lives in the cluster directory,
// pgcluster.Options.Dir: "data/ (PGDATA), postgres.log and the Unix socket"). Starting
// the same directory again must reuse it: PostgreSQL itself recovers a stale
// postmaster.pid and stale socket lock files. Was a bug (fixed): ownEntriesOnly
// (4648609) knew only "data" and "postgres.log" and refused the directory as holding
// foreign files.
func TestFollowupEdgeDevDirReusedAfterCrash(t *testing.T) {
	dir, ctx := followupClusterDir(t)

	c1, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c1.StopImmediate() })
	pidText, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidText), "\n", 2)[0]))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// the backends notice the postmaster's death and exit
	time.Sleep(3 * time.Second)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	t.Logf("cluster directory after the crash: %v", names)

	c2, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	if c2 != nil {
		t.Cleanup(func() { _ = c2.Stop() })
	}
	if err != nil {
		// The directory is otherwise fine: without the stale socket files (what
		// PostgreSQL would have replaced itself) the same directory starts.
		for _, n := range names {
			if strings.HasPrefix(n, ".s.PGSQL.") {
				_ = os.Remove(filepath.Join(dir, n))
			}
		}
		c3, err3 := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
		t.Logf("the same directory without the stale socket files: start error %v", err3)
		if c3 != nil {
			_ = c3.Stop()
		}
	}
	require.NoError(t, err, "a cluster directory left by a crashed server (its socket files remain) must be reused, "+
		"as before ownEntriesOnly; PostgreSQL handles stale lock files itself")
}

// TestFollowupEdgeDevDirCleanStopReused: the ordinary case, a directory stopped cleanly,
// is reused (quick start run twice).
func TestFollowupEdgeDevDirCleanStopReused(t *testing.T) {
	dir, ctx := followupClusterDir(t)
	c1, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, c1.Stop())
	c2, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err)
	require.NoError(t, c2.StopImmediate())
	c3, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	require.NoError(t, err, "after an immediate stop")
	require.NoError(t, c3.Stop())
}

// TestFollowupEdgeFenceFullCheckQuotedKey: the full check's key test compares attname with
// the registered key column: a quoted mixed-case key column, a PRIMARY KEY with INCLUDE,
// writes from inside a function (the full check: the stack has a caller) and after
// REINDEX CONCURRENTLY (the fast path's index OID changed) are accepted.
func TestFollowupEdgeFenceFullCheckQuotedKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE "Odd Items" ("Item ID" int8, "Owner" text, note text,
		  CONSTRAINT odd_pkey PRIMARY KEY ("Item ID") INCLUDE ("Owner", note));
		SELECT synchro.register_table('"Odd Items"', 'odd');
		SELECT synchro.add_scope_rule('odd', 'owner:', 'Owner');
		SELECT synchro.activate_registry();`)
	mustExec(t, db, `DO $$ BEGIN INSERT INTO "Odd Items" VALUES (1, 'a', 'x'); UPDATE "Odd Items" SET note = 'y' WHERE "Item ID" = 1; END $$`)
	mustExec(t, db, `REINDEX INDEX CONCURRENTLY odd_pkey`)
	mustExec(t, db, `INSERT INTO "Odd Items" VALUES (2, 'a', 'x')`)
	mustExec(t, db, `UPDATE "Odd Items" SET note = 'z' WHERE "Item ID" = 2`)
	mustExec(t, db, `DELETE FROM "Odd Items" WHERE "Item ID" = 1`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM "Odd Items"`))
	reg := ddlRegistry(t, db)
	require.True(t, reg.OK, reg.Detail)
}

// TestFollowupEdgeFileChangedHere: the helper's answers: a table from an earlier
// transaction false; created here true; rewritten in a released or live
// subtransaction true; rewritten in a rolled-back one false; a missing oid false (no
// error).
func TestFollowupEdgeFileChangedHere(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE fch (id int8 PRIMARY KEY, v text)`)
	c := reviewSession(t, db.URL, nil)
	q := func(sql string) bool {
		t.Helper()
		var b bool
		require.NoError(t, c.QueryRow(ctx, sql).Scan(&b), sql)
		return b
	}
	require.False(t, q(`SELECT synchro._file_changed_here('fch'::regclass)`))
	require.False(t, q(`SELECT coalesce(synchro._file_changed_here(0), false)`))
	_, err := c.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	require.False(t, q(`SELECT synchro._file_changed_here('fch'::regclass)`))
	_, err = c.Exec(ctx, `CREATE TABLE fch2 (id int8 PRIMARY KEY)`)
	require.NoError(t, err)
	require.True(t, q(`SELECT synchro._file_changed_here('fch2'::regclass)`))
	_, err = c.Exec(ctx, `SAVEPOINT a; ALTER TABLE fch ADD COLUMN w float8 DEFAULT random(); ROLLBACK TO SAVEPOINT a`)
	require.NoError(t, err)
	require.False(t, q(`SELECT synchro._file_changed_here('fch'::regclass)`))
	_, err = c.Exec(ctx, `SAVEPOINT b; ALTER TABLE fch ADD COLUMN w float8 DEFAULT random(); RELEASE SAVEPOINT b`)
	require.NoError(t, err)
	require.True(t, q(`SELECT synchro._file_changed_here('fch'::regclass)`))
	_, err = c.Exec(ctx, `ROLLBACK`)
	require.NoError(t, err)
}

// TestFollowupEdgeViaDomainRuleReadiness: a via rule over a domain over text (staging
// accepts it) keeps activation and readiness ok.
func TestFollowupEdgeViaDomainRuleReadiness(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE DOMAIN pid AS text;
		CREATE TABLE proj (id text PRIMARY KEY, code pid NOT NULL, org text NOT NULL);
		CREATE TABLE task (id int8 PRIMARY KEY, project text NOT NULL, note text);
		SELECT synchro.register_dependency('proj');
		SELECT synchro.register_table('task', 'task');
		SELECT synchro.add_scope_rule('task', 'org:', 'project', 'proj', 'code', 'org');
		SELECT synchro.activate_registry();
		SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_name = 'task'), ARRAY['id', 'project']::name[]);
		SELECT synchro.activate_registry();`)
	reg := ddlRegistry(t, db)
	require.True(t, reg.OK, reg.Detail)
}

// followupClusterDir is a cluster directory not yet made, in a temporary parent the
// postgres OS user can traverse (clusters run as it under root), removed after the
// test, and a context that bounds the test's cluster starts.
func followupClusterDir(t *testing.T) (string, context.Context) {
	t.Helper()
	parent, err := os.MkdirTemp("", "rvd-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return filepath.Join(parent, "c"), ctx
}

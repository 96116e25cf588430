package main

// The operator CLI and the deployment path, from an independent review (2026-12-04):
// the bugs it found (each "Was a bug (fixed)", red before its fix) and the scenarios it
// found sound, kept as regression tests.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/synchro/synchro"

	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// rvURL is dbURL with its user replaced.
func rvURL(t *testing.T, dbURL, user string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.User(user)
	return u.String()
}

// rvRole creates a login role (dropped at the end, best effort) and returns its name.
func rvRole(t *testing.T, attrs string) string {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "rv_cli_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE ROLE "+name+" LOGIN "+attrs)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			return // its database is kept for inspection
		}
		admin, err := pgx.Connect(ctx, testdb.AdminURL())
		if err != nil {
			return
		}
		defer admin.Close(ctx)
		rows, err := admin.Query(ctx, `SELECT datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba WHERE r.rolname = $1`, name)
		if err != nil {
			return
		}
		dbs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, d := range dbs {
			_, _ = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{d}.Sanitize()+" OWNER TO CURRENT_USER")
			if u, err := url.Parse(testdb.AdminURL()); err == nil {
				u.Path = "/" + d
				if c, err := pgx.Connect(ctx, u.String()); err == nil {
					_, _ = c.Exec(ctx, "REASSIGN OWNED BY "+name+" TO CURRENT_USER; DROP OWNED BY "+name)
					_ = c.Close(ctx)
				}
			}
		}
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+name)
		_, _ = admin.Exec(ctx, "DROP ROLE IF EXISTS "+name)
	})
	return name
}

// rvSchemaState is what an install left in db: whether schema synchro exists, who owns
// it, and how many tables it holds.
func rvSchemaState(t *testing.T, db *testdb.DB) (exists bool, owner string, tables int) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), `
		SELECT count(*) > 0, coalesce(max(r.rolname), ''),
		       (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		         WHERE n.nspname = 'synchro' AND c.relkind = 'r')
		  FROM pg_namespace n JOIN pg_roles r ON r.oid = n.nspowner WHERE n.nspname = 'synchro'`).
		Scan(&exists, &owner, &tables)
	require.NoError(t, err)
	return
}

// rvOwnedDB is an empty database owned by a new login role with attrs; it returns the
// database and the role's connection URL.
func rvOwnedDB(t *testing.T, attrs string) (*testdb.DB, string, string) {
	t.Helper()
	db := testdb.NewEmpty(t)
	role := rvRole(t, attrs)
	_, err := db.Pool.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" OWNER TO "+role)
	require.NoError(t, err)
	return db, role, rvURL(t, db.URL, role)
}

// Was a bug (fixed): docs/security.md "Installing": "Install as a superuser, or as a
// role with BYPASSRLS that owns the application's database" (docs/configuration.md,
// `synchro migrate`: "a superuser, or a BYPASSRLS role that owns the database"). That
// role could not install: migration 00001 ran CREATE ROLE (and GRANT synchro_app TO
// synchro_operator), which needs CREATEROLE, and its handler catches only
// duplicate_object, so even with the three roles already in the cluster the
// permission check failed first; now only missing roles and grants are made (42501 "permission denied to create role"). With
// CREATEROLE added the same role installs (TestDeployEdgeInstallAsOwnerWithCreateRole).
func TestDeployEdgeInstallAsDocumentedOwner(t *testing.T) {
	t.Parallel()
	testdb.New(t) // an installed database: the cluster-wide roles exist
	db, _, ownerURL := rvOwnedDB(t, "BYPASSRLS")
	code, early, out := runWithin(t, 60*time.Second, "migrate", "up", "--database-url", ownerURL)
	require.True(t, early)
	exists, owner, tables := rvSchemaState(t, db)
	assert.Equal(t, 0, code, "the documented installer (BYPASSRLS, owns the database) could not install; schema synchro exists=%t owner=%s tables=%d:\n%s",
		exists, owner, tables, out)
}

// The same owner with CREATEROLE installs, and a second run is a no-op (sound).
func TestDeployEdgeInstallAsOwnerWithCreateRole(t *testing.T) {
	t.Parallel()
	db, role, ownerURL := rvOwnedDB(t, "BYPASSRLS CREATEROLE")
	for i := 0; i < 2; i++ {
		code, early, out := runWithin(t, 60*time.Second, "migrate", "up", "--database-url", ownerURL)
		require.True(t, early)
		require.Equal(t, 0, code, out)
	}
	exists, owner, tables := rvSchemaState(t, db)
	require.True(t, exists)
	require.Equal(t, role, owner)
	require.Greater(t, tables, 20)
}

// Was a bug (fixed): an install refused for a missing privilege (the deploy role lacks
// CREATEROLE: 42501, a clear error and exit 1) must leave nothing behind, so that the
// corrected deploy (the same command as a superuser) installs. The prelude committed
// schema synchro (owned by the deploy role) and goose committed synchro.goose_version
// in it before migration 00001 failed; the superuser's run was then refused by the
// prelude's foreign-schema guard: SY400 "schema synchro exists and belongs to another
// role", naming a problem the operator never created (docs/install.md: the prelude's
// refusals "change nothing"; the brief: no partial install).
func TestDeployEdgeFailedInstallLeavesNothing(t *testing.T) {
	t.Parallel()
	db, _, ownerURL := rvOwnedDB(t, "BYPASSRLS")
	// Migration 00001 refused after the prelude and goose made their schema and table,
	// whether or not the cluster's roles exist already (another test may have made
	// them): an event trigger refuses its first GRANT as a missing privilege would.
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `
		CREATE FUNCTION public.rv_refuse() RETURNS event_trigger LANGUAGE plpgsql AS
		  $f$ BEGIN RAISE EXCEPTION 'permission denied (test)' USING ERRCODE = '42501'; END $f$;
		CREATE EVENT TRIGGER rv_refuse_grant ON ddl_command_start WHEN TAG IN ('GRANT') EXECUTE FUNCTION public.rv_refuse();`)
	require.NoError(t, err)
	code, early, out := runWithin(t, 60*time.Second, "migrate", "up", "--database-url", ownerURL)
	require.True(t, early)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "SQLSTATE 42501", out)
	exists, owner, tables := rvSchemaState(t, db)
	assert.False(t, exists, "the failed install left schema synchro (owner %s, %d tables)", owner, tables)

	_, err = db.Pool.Exec(ctx, `DROP EVENT TRIGGER rv_refuse_grant`)
	require.NoError(t, err)
	code, early, out = runWithin(t, 60*time.Second, "migrate", "up", "--database-url", db.URL)
	require.True(t, early)
	assert.Equal(t, 0, code, "the superuser's install after the failed one:\n%s", out)
}

// Was a bug (fixed): a connection string typed where the command expects none (the URL
// given positionally instead of after --database-url, a forgotten flag name in a deploy
// script) was echoed in full by the argument errors, password included.
// docs/configuration.md: "Connection strings never appear in logs or errors ... a
// string that does not parse is reported without its text".
func TestDeployEdgePositionalURLNotEchoed(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://u:%s@127.0.0.1:%d/d?sslmode=disable&connect_timeout=1", reviewSecret, closedPort(t))
	for name, args := range map[string][]string{
		"ready":          {"ready", url},
		"migrate_up":     {"migrate", "up", url},
		"migrate_status": {"migrate", "status", url},
		"migrate":        {"migrate", url},
		"run":            {"run", url},
		"dev":            {"dev", url},
		"no_command":     {url},
		"migrations":     {"migrations", url},
	} {
		t.Run(name, func(t *testing.T) {
			code, early, out := runWithin(t, 10*time.Second, args...)
			require.True(t, early)
			assert.NotEqual(t, 0, code)
			assert.NotContains(t, out, reviewSecretTail, "synchro %v printed the password:\n%s", args[:len(args)-1], out)
		})
	}
}

// The password in PGPASSWORD (pgx reads it when the URL has none) never shows either,
// whatever the connection failure (sound).
func TestDeployEdgePGPASSWORDNotPrinted(t *testing.T) {
	t.Setenv("PGPASSWORD", reviewSecret)
	t.Setenv("PGSSLPASSWORD", reviewSecret)
	for _, u := range []string{
		fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=2", closedPort(t)),
		fmt.Sprintf("postgres://u@127.0.0.1:%d/d?sslmode=disable&connect_timeout=2", blackhole(t)),
		"host=127.0.0.1 port=notaport user=u dbname=d",
	} {
		for _, cmd := range [][]string{{"ready"}, {"migrate", "up"}, {"migrate", "status"}, {"dev", "--database-url", u}} {
			args := cmd
			if cmd[0] != "dev" {
				args = append(append([]string{}, cmd...), "--database-url", u)
			}
			code, early, out := runWithin(t, 20*time.Second, args...)
			require.True(t, early, "%v", args)
			assert.Equal(t, 1, code, out)
			assert.NotContains(t, out, reviewSecretTail, out)
		}
	}
}

// `synchro run` with a connection string that does not parse: the runner's and the
// readiness pool's parse errors must not carry it (the other commands are covered by
// TestCLIPasswordNotInParseErrors; run is not).
func TestDeployEdgeRunParseErrorRedacted(t *testing.T) {
	t.Parallel()
	for name, dsn := range map[string]string{
		"spaces around =": "host=127.0.0.1 port=notaport user=u dbname=d password = " + reviewSecret,
		"bad sslmode":     "host=127.0.0.1 port=5432 sslmode=bogus user=u dbname=d password=" + reviewSecret,
		"url bad port":    "postgres://u:" + reviewSecret + "@127.0.0.1:99999999/d",
	} {
		t.Run(name, func(t *testing.T) {
			code, early, out := runWithin(t, 10*time.Second, "run", "--database-url", dsn, "--listen", "127.0.0.1:0")
			require.True(t, early, out)
			assert.Equal(t, 1, code, out)
			assert.NotContains(t, out, reviewSecretTail, out)
		})
	}
}

// rvMetric reads one unlabelled sample of the sidecar's /metrics.
func rvMetric(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	return math.NaN()
}

// A deploy pipeline that runs `synchro migrate up` on every deploy runs it while the
// runner (same release) streams and the application writes. docs/install.md: "run again
// on a current install it changes nothing (no migration, no table lock)". Each run must
// finish while a write transaction on a registered table is open, and the stream must
// go on: no quarantine, every write materialized, no failure retried by the runner.
func TestDeployEdgeMigrateWhileStreaming(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := readyDB(t)
	base := sidecar(t, db)
	waitReadyz(t, base, func(code int, _ readyz) bool { return code == http.StatusOK })
	transientBefore := rvMetric(t, base, "synchro_runner_transient_errors_total")
	reconnectsBefore := rvMetric(t, base, "synchro_runner_reconnects_total")

	// The writers: one insert or update per transaction until stopped.
	stop := make(chan struct{})
	written := make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		for i := 1000; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Pool.Exec(ctx, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, i); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			if _, err := db.Pool.Exec(ctx, `UPDATE items SET owner = 'b' WHERE id = $1`, i-1); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			n++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// An open write transaction on the registered table, across every migrate.
	open, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = open.Exec(ctx, `INSERT INTO items (id, owner) VALUES (999999, 'a')`)
	require.NoError(t, err)

	for i := 0; i < 3; i++ {
		start := time.Now()
		code, early, out := runWithin(t, 30*time.Second, "migrate", "up", "--database-url", db.URL)
		assert.True(t, early && code == 0,
			"migrate up #%d with the runner streaming and a write transaction open: exit %d after %s (early %t)\n%s",
			i, code, time.Since(start).Round(time.Millisecond), early, out)
		t.Logf("migrate up #%d took %s", i, time.Since(start).Round(time.Millisecond))
	}
	require.NoError(t, open.Commit(ctx))
	close(stop)
	n := <-written
	require.Greater(t, n, 10)

	// Every row written reaches synchro.effect (its last write, under its scope).
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing int
		require.NoError(t, db.Pool.QueryRow(ctx, `
			SELECT count(*) FROM items i
			 WHERE i.id >= 1000 AND NOT EXISTS (SELECT FROM synchro.effect e
			         WHERE e.pk = i.id::text AND e.scope = 'owner:' || i.owner)`).Scan(&missing))
		if missing == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d rows never materialized", missing, n)
		time.Sleep(100 * time.Millisecond)
	}
	var quarantined int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.quarantine`).Scan(&quarantined))
	assert.Zero(t, quarantined)
	waitReadyz(t, base, func(code int, _ readyz) bool { return code == http.StatusOK })
	assert.Equal(t, transientBefore, rvMetric(t, base, "synchro_runner_transient_errors_total"), "the runner retried a failure during the migrations")
	assert.Equal(t, reconnectsBefore, rvMetric(t, base, "synchro_runner_reconnects_total"), "the runner reconnected during the migrations")
}

// Concurrent deploys on an empty database, through every documented way at once
// (docs/install.md: "all writing one history"; the install lock makes them take
// turns): three `synchro migrate up` (two of them real processes), the `synchro sql` script applied whole, and a
// team's goose (PrepareGoose, then goose's Provider with its session locker on
// InstallLockID). Each succeeds, every migration is recorded exactly once, and a
// later `migrate up` finds nothing to do.
func TestDeployEdgeConcurrentInstallersAllWays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	db := testdb.NewEmpty(t)
	script, err := synchro.SQL()
	require.NoError(t, err)

	bin := runproc.BuildT(t)
	var g errgroup.Group
	// Two deploy processes (the binary, its URL in SYNCHRO_DATABASE_URL), and one more
	// in this process.
	for i := 0; i < 2; i++ {
		g.Go(func() error {
			cmd := exec.CommandContext(ctx, bin, "migrate", "up")
			cmd.Env = append(os.Environ(), "SYNCHRO_DATABASE_URL="+db.URL)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("synchro migrate up (process %d): %w\n%s", i, err, out)
			}
			return nil
		})
	}
	g.Go(func() error {
		e, out := reviewEnv()
		if code := run(ctx, e, []string{"migrate", "up", "--database-url", db.URL}); code != 0 {
			return fmt.Errorf("migrate up in-process: exit %d\n%s", code, out.String())
		}
		return nil
	})
	g.Go(func() error {
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		if _, err := conn.PgConn().Exec(ctx, script).ReadAll(); err != nil {
			return fmt.Errorf("synchro sql script: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		sqlDB, err := sql.Open("pgx", db.URL+"&options=-c%20search_path%3Dpg_catalog%2Cpg_temp")
		if err != nil {
			return err
		}
		defer sqlDB.Close()
		if err := synchro.PrepareGoose(ctx, sqlDB); err != nil {
			return fmt.Errorf("prepare goose: %w", err)
		}
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(synchro.InstallLockID), lock.WithLockTimeout(1, 100))
		if err != nil {
			return err
		}
		p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, synchro.GooseMigrations(),
			goose.WithTableName(synchro.GooseTable), goose.WithSessionLocker(locker))
		if err != nil {
			return err
		}
		if _, err := p.Up(ctx); err != nil {
			return fmt.Errorf("goose up: %w", err)
		}
		return nil
	})
	require.NoError(t, g.Wait())

	var dups []int64
	rows, err := db.Pool.Query(ctx, `SELECT version_id FROM synchro.goose_version WHERE is_applied GROUP BY 1 HAVING count(*) > 1`)
	require.NoError(t, err)
	dups, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	assert.Empty(t, dups, "versions recorded more than once")

	st, err := synchro.Status(ctx, db.SQL)
	require.NoError(t, err)
	for _, s := range st {
		assert.True(t, s.Applied, "%s", s.Name)
	}
	code, _, out := runWithin(t, 60*time.Second, "migrate", "up", "--database-url", db.URL)
	require.Equal(t, 0, code, out)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.goose_version`).Scan(&n))
	assert.Equal(t, len(st)+1, n+len(dups), "goose_version rows (version 0 plus one per migration)")
}

// A database that does not take writes (a hot standby, default_transaction_read_only:
// a deploy pointed at the wrong host): `synchro migrate up` exits 1 with SQLSTATE 25006
// and creates nothing; `synchro migrate status` and `synchro ready` still answer (they
// only read).
func TestDeployEdgeReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, installed := range []bool{false, true} {
		t.Run(fmt.Sprintf("installed=%t", installed), func(t *testing.T) {
			var db *testdb.DB
			if installed {
				db = readyDB(t)
			} else {
				db = testdb.NewEmpty(t)
			}
			_, err := db.Pool.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db.Name}.Sanitize()+" SET default_transaction_read_only = on")
			require.NoError(t, err)
			_, _, tablesBefore := rvSchemaState(t, db)

			code, early, out := runWithin(t, 30*time.Second, "migrate", "up", "--database-url", db.URL)
			require.True(t, early)
			assert.Equal(t, 1, code, out)
			assert.Contains(t, out, "SQLSTATE 25006", out)
			exists, _, tables := rvSchemaState(t, db)
			assert.Equal(t, installed, exists, "schema synchro")
			assert.Equal(t, tablesBefore, tables)

			code, _, out = runWithin(t, 30*time.Second, "migrate", "status", "--database-url", db.URL)
			assert.Equal(t, 0, code, out)
			if installed {
				code, _, out = runWithin(t, 30*time.Second, "ready", "--database-url", db.URL)
				assert.Equal(t, 1, code, out)
				assert.Contains(t, out, "not ready: database, worker", out)
			}
		})
	}
}

// `synchro dev --dir DIR` run as root (README "Requirements": "When run as root,
// clusters run as the postgres OS user") on a directory that already exists and is not
// a cluster directory (docs/configuration.md: "--dir: cluster directory, reused when it
// exists"): was a bug (fixed): pgcluster's prepareDir chowned everything under DIR to
// the postgres OS user, recursively, before anything else; a directory holding anything
// but a cluster's own entries is now refused. A root-only file there (0600) becomes the postgres
// user's: `synchro dev --dir /tmp`, or a project directory, hands every file in it to
// another OS user. Expected: files dev did not create keep their owner.
func TestDeployEdgeDevDirKeepsForeignFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only as root")
	}
	parent, err := os.MkdirTemp("", "synchro-review-cli-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	dir := filepath.Join(parent, "project")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "src"), 0o755))
	secret := filepath.Join(dir, "src", "deploy.key")
	require.NoError(t, os.WriteFile(secret, []byte("root only\n"), 0o600))

	// Refused (exit 1, the directory named, nothing of it changed): a cluster directory
	// holds only what a cluster makes.
	code, early, out := runWithin(t, 60*time.Second, "dev", "--dir", dir)
	require.True(t, early)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "use an empty or new directory")
	fi, err := os.Stat(secret)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	assert.Equal(t, uint32(0), st.Uid, "synchro dev --dir %s gave %s (mode %v) to uid %d", dir, secret, fi.Mode().Perm(), st.Uid)
}

// Was a bug (fixed): a password with an unescaped "/" (generated passwords hold one; URL-encoding is
// easy to forget): "postgres://app:2024/<rest>@host/db" still parses, as host "app",
// port 2024 and database "<rest>@host/db". describeDB, the "not shown: it may hold a
// password" allow-list, then prints the rest of the password as the database name, in
// the "installing" line and in every connect error (pgx's own message repeats it).
// docs/configuration.md: "The password of a connection URL never appears in logs or
// errors." Fail closed: a URL whose authority or path holds such an "@" is reported as
// unparsable, without its text.
func TestDeployEdgeUnescapedSlashInPasswordNotLogged(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"postgres://app:2024/" + reviewSecret + "@127.0.0.1:1/app?connect_timeout=2&sslmode=disable",
		"postgres://app:/" + reviewSecret + "@127.0.0.1:1/app?connect_timeout=2&sslmode=disable",
	} {
		assert.NotContains(t, describeDB(u), reviewSecretTail, "describeDB(%q)", u)
		for _, cmd := range [][]string{{"ready"}, {"migrate", "up"}} {
			code, early, out := runWithin(t, 20*time.Second, append(cmd, "--database-url", u)...)
			require.True(t, early)
			assert.Equal(t, 1, code)
			assert.NotContains(t, out, reviewSecretTail, "synchro %v with %q:\n%s", cmd, u, out)
		}
	}
}

// `synchro run` as a real process, stopped with SIGINT (docs/configuration.md: "SIGTERM
// or SIGINT stops it cleanly: it finishes and acknowledges the transaction in hand and
// exits 0"; the tests elsewhere send SIGTERM): exit status 0, and the slot is
// acknowledged past every write materialized before the signal.
func TestDeployEdgeRunSIGINTAcknowledges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := runproc.BuildT(t)
	db := readyDB(t)
	slot := nonSlotChars.ReplaceAllString(strings.ToLower(db.Name), "_")
	if len(slot) > 63 {
		slot = slot[len(slot)-63:]
	}
	p := runproc.StartT(t, runproc.Options{Bin: bin, DatabaseURL: db.URL, Slot: slot})
	require.Eventually(t, func() bool { code, _ := p.Get("/readyz"); return code == http.StatusOK },
		60*time.Second, 50*time.Millisecond, "never ready:\n%s", p.Logs())

	var last string
	for i := 0; i < 30; i++ {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, 5000+i)
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&last))
		require.NoError(t, tx.Commit(ctx))
	}
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(DISTINCT pk) FROM synchro.effect WHERE pk::int8 >= 5000`).Scan(&n))
		return n == 30
	}, 30*time.Second, 50*time.Millisecond)

	require.NoError(t, syscall.Kill(p.PID(), syscall.SIGINT))
	require.True(t, p.Wait(30*time.Second), "synchro run did not exit on SIGINT:\n%s", p.Logs())
	assert.Equal(t, "exit status 0", p.Exit(), p.Logs())
	var acked bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
		last, slot).Scan(&acked))
	assert.True(t, acked, "the slot is not acknowledged past the last materialized write (%s)", last)
}

// docs/install.md "Upgrading a running system": a fence refresh that must re-create a
// trigger (here: one found disabled) takes SHARE ROW EXCLUSIVE on the table; "Run such
// an upgrade with a lock_timeout (PGOPTIONS='-c lock_timeout=5s') and retry on 55P03".
// The CLI honours PGOPTIONS: with a write transaction open the run fails with 55P03
// within its timeout, changing nothing; once the writer is done, the retry succeeds and
// the trigger is enabled again.
func TestDeployEdgeMigrateHonoursPGOPTIONSLockTimeout(t *testing.T) {
	ctx := context.Background()
	db := readyDB(t)
	_, err := db.Pool.Exec(ctx, `ALTER TABLE items DISABLE TRIGGER synchro_fence_insert`)
	require.NoError(t, err)
	writer, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback(ctx) }()
	_, err = writer.Exec(ctx, `LOCK TABLE items IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	t.Setenv("PGOPTIONS", "-c lock_timeout=1s")
	start := time.Now()
	code, early, out := runWithin(t, 30*time.Second, "migrate", "up", "--database-url", db.URL)
	require.True(t, early, "migrate up waited for the writer past its lock_timeout:\n%s", out)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "55P03", out)
	assert.Less(t, time.Since(start), 15*time.Second)
	enabled := func() string {
		var s string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'items'::regclass AND tgname = 'synchro_fence_insert'`).Scan(&s))
		return s
	}
	assert.Equal(t, "D", enabled(), "the failed run changed the trigger")

	require.NoError(t, writer.Rollback(ctx))
	code, _, out = runWithin(t, 30*time.Second, "migrate", "up", "--database-url", db.URL)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "O", enabled())
}

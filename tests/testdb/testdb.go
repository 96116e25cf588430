// Package testdb gives every SQL test its own database with the Synchro pack installed.
//
// A test binary calls Main from TestMain. Main starts one private PostgreSQL cluster
// (internal/pgcluster) for the whole binary, or uses the server named by
// SYNCHRO_TEST_DATABASE_URL (which must run with wal_level=logical). New then clones a
// database per test from a pgtestdb template migrated by synchro.Install, keyed by
// synchro.Hash(): a test costs a CREATE DATABASE ... TEMPLATE, not an install.
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		db := testdb.New(t)
//		_, err := db.Pool.Exec(ctx, "...")
//	}
//
// A failed test keeps its database (pgtestdb logs its URL); replication slots are
// dropped either way, since they pin WAL and block DROP DATABASE.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/peterldowns/pgtestdb"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/internal/pgcluster"
)

// EnvDatabaseURL names an existing server to test against instead of a private cluster.
// Its user must be able to create roles and databases.
const EnvDatabaseURL = "SYNCHRO_TEST_DATABASE_URL"

// testRole owns and connects to every test database: a superuser, so tests can create
// and register tables and SET ROLE to synchro_app, synchro_operator or synchro_runner,
// and REPLICATION, so they can open replication connections and slots.
var testRole = pgtestdb.Role{
	Username:     "synchro_test",
	Password:     "synchro_test",
	Capabilities: "SUPERUSER REPLICATION",
}

// harness is the test binary's singleton, set once by Main before any test runs and
// read-only afterwards.
var harness struct {
	admin   pgtestdb.Config
	cluster *pgcluster.Cluster
}

// DB is one test's database.
type DB struct {
	Name string
	URL  string
	Pool *pgxpool.Pool
	SQL  *sql.DB // database/sql over pgx, for synchro.Install and goose
}

// Main starts the cluster (or checks the external server), runs the tests, stops the
// cluster and exits. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m, nil))
}

// MainWithConf is Main with server settings of the private cluster added (such as
// shared_preload_libraries): for a package of tests that needs them alone.
func MainWithConf(m *testing.M, conf map[string]string) {
	os.Exit(run(m, conf))
}

func run(m *testing.M, conf map[string]string) int {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if raw := os.Getenv(EnvDatabaseURL); raw != "" {
		admin, err := configFromURL(raw)
		if err == nil {
			err = checkWalLevel(ctx, admin.URL())
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testdb: %s: %v\n", EnvDatabaseURL, err)
			return 2
		}
		harness.admin = admin
		return m.Run()
	}

	start := time.Now()
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{Logger: logger, ExtraConf: conf, TempRoot: memoryTempRoot()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "testdb: start cluster: %v\n", err)
		return 2
	}
	logger.Debug("testdb: cluster ready", "took", time.Since(start))
	harness.cluster = cluster
	harness.admin = pgtestdb.Config{
		DriverName: "pgx",
		Host:       "127.0.0.1",
		Port:       fmt.Sprint(cluster.Port()),
		User:       "postgres",
		Database:   "postgres",
		Options:    "sslmode=disable",
	}
	code := m.Run()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: stop cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// memoryRoot is where the test cluster lives when it is a memory filesystem with room.
const memoryRoot = "/dev/shm"

// memoryMinFree is the room memoryRoot must have: the suite's cluster peaks well below
// it (every test's database is dropped when it passes).
const memoryMinFree = 4 << 30

// tmpfsMagic is the statfs f_type of tmpfs (linux/magic.h TMPFS_MAGIC).
const tmpfsMagic = 0x01021994

// memoryTempRoot returns memoryRoot when it is a tmpfs with memoryMinFree free, else ""
// (the OS temp dir). Every test costs a CREATE DATABASE of about 400 files and a DROP of
// them, and on ext4 that churn made inode allocation (its scan for a slot not recently
// freed) 8 % of the whole suite's CPU, measured with perf over `make test`'s tests
// package; on tmpfs file creation is a memory allocation. The cluster is a throw-away
// one with fsync off already, so a memory filesystem loses nothing it kept.
func memoryTempRoot() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(memoryRoot, &st); err != nil || st.Type != tmpfsMagic {
		return ""
	}
	if st.Bavail*uint64(st.Bsize) < memoryMinFree {
		return ""
	}
	return memoryRoot
}

// Cluster is the private cluster, for crash and restart tests. Nil when the tests run
// against SYNCHRO_TEST_DATABASE_URL: such tests should t.Skip. Restarting it affects
// every parallel test of the binary, so crash tests belong in their own package.
func Cluster() *pgcluster.Cluster { return harness.cluster }

// AdminURL connects to the server's maintenance database as its superuser.
func AdminURL() string { return harness.admin.URL() }

// New returns a fresh database with the Synchro pack installed, dropped after the test
// (kept when it failed). Safe for parallel tests.
func New(t testing.TB) *DB {
	t.Helper()
	requireMain(t)
	conf := harness.admin
	conf.TestRole = &testRole
	inst := pgtestdb.Custom(t, conf, migrator{})
	// Registered after pgtestdb's cleanup, so it runs before the database is dropped.
	return open(t, inst.Database, inst.URL(), false)
}

// NewEmpty returns a fresh empty database (nothing installed, not cloned from the
// template), connected as the server's superuser, dropped after the test (kept when it
// failed). For install tests.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	return NewEmptyWith(t, "")
}

// NewEmptyWith is NewEmpty with CREATE DATABASE options, such as
// "TEMPLATE template0 ENCODING 'SQL_ASCII' LOCALE 'C'".
func NewEmptyWith(t testing.TB, options string) *DB {
	t.Helper()
	requireMain(t)
	ctx := context.Background()
	name := "synchro_empty_" + randomHex(6)
	admin, err := pgx.Connect(ctx, harness.admin.URL())
	if err != nil {
		t.Fatalf("testdb: connect admin: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" "+options); err != nil {
		t.Fatalf("testdb: create %s: %v", name, err)
	}
	t.Logf("testdb: empty database %s", name)
	conf := harness.admin
	conf.Database = name
	return open(t, name, conf.URL(), true)
}

// RequireLibrary skips t unless the server's library directory holds the loadable module
// name (without ".so"), such as the output plugin wal2json. The PostgreSQL 16, 17 and 18
// binaries of the version matrix (scripts/fetch-pg, make test-matrix) have no wal2json;
// PostgreSQL 15 from Debian has it with postgresql-15-wal2json.
func RequireLibrary(t testing.TB, name string) {
	t.Helper()
	requireMain(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, harness.admin.URL())
	if err != nil {
		t.Fatalf("testdb: connect admin: %v", err)
	}
	defer conn.Close(ctx)
	var dir, version string
	var found bool
	err = conn.QueryRow(ctx, `
		SELECT setting, (pg_stat_file(setting || '/' || $1 || '.so', true)).size IS NOT NULL,
		       current_setting('server_version')
		FROM pg_config WHERE name = 'PKGLIBDIR'`, name).Scan(&dir, &found, &version)
	if err != nil {
		t.Fatalf("testdb: look for library %s: %v", name, err)
	}
	if !found {
		t.Skipf("testdb: needs %s, which this server (PostgreSQL %s) does not have in %s", name, version, dir)
	}
}

// ReplicationURL is URL for a logical replication connection (replication=database).
func (db *DB) ReplicationURL() string {
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	return db.URL + sep + "replication=database"
}

func open(t testing.TB, name, dbURL string, dropDatabase bool) *DB {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	sqlDB, err := sql.Open("pgx", dbURL)
	if err != nil {
		pool.Close()
		t.Fatalf("testdb: sql.Open: %v", err)
	}
	t.Cleanup(func() {
		checkDerived(t, pool)
		pool.Close()
		_ = sqlDB.Close()
		if err := dropSlots(context.Background(), name); err != nil {
			t.Errorf("testdb: drop replication slots of %s: %v", name, err)
		}
		if dropDatabase && !t.Failed() {
			if err := dropDB(context.Background(), name); err != nil {
				t.Errorf("testdb: drop %s: %v", name, err)
			}
		}
	})
	return &DB{Name: name, URL: dbURL, Pool: pool, SQL: sqlDB}
}

// derivedMismatches counts the stored derived values that differ from the expressions
// they are written with (migration 00018: the writers compute them, nothing generates
// them): scope_hash of effect and membership, image_bytes of effect and projection.
const derivedMismatches = `
SELECT (SELECT count(*) FROM synchro.effect
         WHERE scope_hash <> synchro._scope_hash(scope) OR image_bytes IS DISTINCT FROM octet_length(image::text))
     + (SELECT count(*) FROM synchro.membership WHERE scope_hash <> synchro._scope_hash(scope))
     + (SELECT count(*) FROM synchro.projection WHERE image_bytes IS DISTINCT FROM octet_length(image::text))`

// checkDerived fails t when a derived column of the materialized tables was written
// wrong, whatever wrote it: every test's database is checked after the test. A
// database without the pack (or one the test broke) is not checked.
func checkDerived(t testing.TB, pool *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int64
	if err := pool.QueryRow(ctx, derivedMismatches).Scan(&n); err != nil {
		return
	}
	if n > 0 {
		t.Errorf("testdb: %d stored scope_hash or image_bytes values differ from their expressions", n)
	}
}

// dropSlots terminates the walsenders of every replication slot of database name and
// drops the slots. Termination is asynchronous, so a slot still active (55006) is
// retried for up to 10s.
func dropSlots(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, harness.admin.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		rows, err := conn.Query(ctx, `
			SELECT slot_name, active_pid, pg_terminate_backend(active_pid)
			FROM pg_replication_slots WHERE database = $1`, name)
		if err != nil {
			return err
		}
		slots, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var slot string
			var pid *int32
			var terminated *bool
			return slot, r.Scan(&slot, &pid, &terminated)
		})
		if err != nil {
			return err
		}
		if len(slots) == 0 {
			return nil
		}
		busy := false
		for _, slot := range slots {
			_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
			case errors.As(err, &pgErr) && pgErr.Code == "55006": // object_in_use: still active
				busy = true
			case errors.As(err, &pgErr) && pgErr.Code == "42704": // undefined_object: gone meanwhile
			default:
				return fmt.Errorf("drop slot %s: %w", slot, err)
			}
		}
		if !busy {
			continue // re-list: a slot may have been created meanwhile
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slots still active: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func dropDB(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, harness.admin.URL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	return err
}

// migrator builds pgtestdb's template with the same Install the CLI uses.
type migrator struct{}

func (migrator) Hash() (string, error) { return synchro.Hash(), nil }

func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	return synchro.Install(ctx, db)
}

func requireMain(t testing.TB) {
	t.Helper()
	if harness.admin.Host == "" {
		t.Fatalf("testdb: call testdb.Main(m) from TestMain")
	}
}

func configFromURL(raw string) (pgtestdb.Config, error) {
	cc, err := pgx.ParseConfig(raw)
	if err != nil {
		return pgtestdb.Config{}, errors.New("cannot parse the URL") // never echo a password
	}
	opts := url.Values{}
	opts.Set("sslmode", "prefer")
	if cc.TLSConfig == nil {
		opts.Set("sslmode", "disable")
	}
	return pgtestdb.Config{
		DriverName: "pgx",
		Host:       cc.Host,
		Port:       fmt.Sprint(cc.Port),
		User:       cc.User,
		Password:   cc.Password,
		Database:   cc.Database,
		Options:    opts.Encode(),
	}, nil
}

func checkWalLevel(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return err
	}
	if level != "logical" {
		return fmt.Errorf("wal_level is %q, Synchro needs logical", level)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

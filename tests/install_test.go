package tests

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// The runner reads values, keys and messages as UTF-8. In a SQL_ASCII or LATIN1
// database, one INSERT of a non-ASCII value into a registered table was quarantined,
// under both decoders (found in the twelfth session): the pack refuses to install there
// (SY400), before it creates anything.
func TestInstallRefusesNonUTF8Database(t *testing.T) {
	t.Parallel()
	for _, enc := range []string{"SQL_ASCII", "LATIN1"} {
		t.Run(enc, func(t *testing.T) {
			t.Parallel()
			db := testdb.NewEmptyWith(t, "TEMPLATE template0 ENCODING '"+enc+"' LOCALE 'C'")
			err := synchro.Install(context.Background(), db.SQL)
			var pe *pgconn.PgError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "SY400", pe.Code)
			require.Contains(t, pe.Message, "UTF8")
			var n int
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_namespace WHERE nspname = 'synchro'`).Scan(&n))
			require.Zero(t, n, "nothing installed")
		})
	}
}

func TestInstall(t *testing.T) {
	t.Parallel()

	t.Run("TwiceIsNoOp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.New(t) // installed once by the template
		before := gooseVersions(t, db)
		require.NotEmpty(t, before)
		require.NoError(t, synchro.Install(ctx, db.SQL))
		require.NoError(t, synchro.Install(ctx, db.SQL))
		require.Equal(t, before, gooseVersions(t, db))
	})

	t.Run("ConcurrentOnOneDatabase", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewEmpty(t)
		installConcurrently(t, db.URL, 10)
		status, err := synchro.Status(context.Background(), db.SQL)
		require.NoError(t, err)
		for _, s := range status {
			require.True(t, s.Applied, "migration %s applied", s.Name)
		}
	})

	t.Run("ConcurrentOnTwoDatabases", func(t *testing.T) {
		t.Parallel()
		a, b := testdb.NewEmpty(t), testdb.NewEmpty(t)
		var g errgroup.Group
		for _, db := range []*testdb.DB{a, b} {
			g.Go(func() error { return synchro.Install(context.Background(), db.SQL) })
		}
		require.NoError(t, g.Wait())
	})

	t.Run("RolesExist", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_roles
			WHERE rolname IN ('synchro_app', 'synchro_operator', 'synchro_runner')`).Scan(&n))
		require.Equal(t, 3, n)
	})

	t.Run("NoRoleHasTableAccess", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.New(t)
		rows, err := db.Pool.Query(ctx,
			`SELECT tablename FROM pg_tables WHERE schemaname = 'synchro' ORDER BY tablename`)
		require.NoError(t, err)
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, tables)

		for _, role := range []string{"synchro_app", "synchro_operator", "synchro_runner"} {
			for _, table := range tables {
				name := pgx.Identifier{"synchro", table}.Sanitize()
				for _, stmt := range []string{
					"SELECT * FROM " + name + " LIMIT 1",
					"INSERT INTO " + name + " DEFAULT VALUES",
					"DELETE FROM " + name,
				} {
					var pgErr *pgconn.PgError
					err := asRole(ctx, t, db, role, stmt)
					require.ErrorAs(t, err, &pgErr, "%s: %s", role, stmt)
					require.Equal(t, "42501", pgErr.Code, "%s: %s", role, stmt)
				}
			}
		}
	})

	t.Run("ScriptAppliesToEmptyDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		script, err := synchro.SQL()
		require.NoError(t, err)
		db := testdb.NewEmpty(t)
		conn, err := pgx.Connect(ctx, db.URL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		// The simple protocol runs a multi-statement script in one round trip, as psql -f would.
		_, err = conn.PgConn().Exec(ctx, script).ReadAll()
		require.NoError(t, err)
		var exists bool
		require.NoError(t, conn.QueryRow(ctx,
			`SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'synchro')`).Scan(&exists))
		require.True(t, exists)
	})
}

// installConcurrently runs n installs at once, each through its own *sql.DB, as n
// deploys would.
func installConcurrently(t *testing.T, url string, n int) {
	t.Helper()
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			db, err := sql.Open("pgx", url)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := synchro.Install(context.Background(), db); err != nil {
				return fmt.Errorf("installer %d: %w", i, err)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
}

type gooseVersion struct {
	ID        int64
	VersionID int64
	IsApplied bool
	Tstamp    string
}

func gooseVersions(t *testing.T, db *testdb.DB) []gooseVersion {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT id, version_id, is_applied, tstamp::text FROM synchro.goose_version ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[gooseVersion])
	require.NoError(t, err)
	return out
}

// asRole runs stmt as role in a transaction that is rolled back.
func asRole(ctx context.Context, t *testing.T, db *testdb.DB, role, stmt string) error {
	t.Helper()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)
	_, err = tx.Exec(ctx, stmt)
	return err
}

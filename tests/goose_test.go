package tests

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// releaseDir is the frozen goose source of a release (tests/testdata/releases).
func releaseDir(release string) string { return filepath.Join("testdata", "releases", release) }

// newestRelease is the newest frozen release.
const newestRelease = "v0.1.0"

// gooseUp runs plain goose, the way a team's pipeline does: goose's Provider over a
// source, with a version table of the team's choosing and goose's own Postgres session
// locker. It returns the versions goose applied.
func gooseUp(t *testing.T, db *sql.DB, src fs.FS, table string) []int64 {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, src, goose.WithTableName(table))
	require.NoError(t, err)
	res, err := p.Up(context.Background())
	require.NoError(t, err)
	var out []int64
	for _, r := range res {
		out = append(out, r.Source.Version)
	}
	return out
}

// installV010 installs the first release through plain goose into an empty database,
// under the version table v0.1.0's own `synchro migrate up` used.
func installV010(t *testing.T, db *testdb.DB) {
	t.Helper()
	applied := gooseUp(t, db.SQL, os.DirFS(releaseDir("v0.1.0")), "synchro_goose_version")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, applied)
}

// applyScript runs an SQL script in one round trip, as psql -f would.
func applyScript(ctx context.Context, t *testing.T, url, script string) error {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.PgConn().Exec(ctx, script).ReadAll()
	return err
}

// catalogFingerprint lists what an install defines in schema synchro (functions with
// their definitions and privileges, relations with columns, constraints, indexes, view
// definitions and privileges, types, the schema's privileges) and the rows of its tables
// (but the random server key and goose's timestamps). Two installs with equal
// fingerprints are the same install.
func catalogFingerprint(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `
		SELECT 'schema acl ' || coalesce(nspacl::text, '') FROM pg_namespace WHERE nspname = 'synchro'
		UNION ALL
		SELECT 'function ' || p.oid::regprocedure::text || ' ' || pg_get_functiondef(p.oid) || ' acl ' || coalesce(p.proacl::text, '')
		  FROM pg_proc p WHERE p.pronamespace = 'synchro'::regnamespace AND p.prokind IN ('f', 'p', 'w')
		UNION ALL
		SELECT 'aggregate ' || p.oid::regprocedure::text || ' acl ' || coalesce(p.proacl::text, '')
		  FROM pg_proc p WHERE p.pronamespace = 'synchro'::regnamespace AND p.prokind = 'a'
		UNION ALL
		SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' acl ' || coalesce(c.relacl::text, '')
		       || CASE WHEN c.relkind = 'v' THEN ' view ' || pg_get_viewdef(c.oid) ELSE '' END
		  FROM pg_class c WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind <> 'i'
		UNION ALL
		SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		       || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		       || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || ' #' || a.attnum
		       || ' acl ' || coalesce(a.attacl::text, '')
		  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
		 WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind IN ('r', 'v', 'p', 'c')
		UNION ALL
		-- PostgreSQL 18 catalogs NOT NULL as named constraints whose names follow
		-- the table's name at creation; the column line above already says
		-- "not null", so they are left out (a table moved in by ALTER ... SET
		-- SCHEMA keeps names a fresh CREATE would not give).
		SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
		  FROM pg_constraint WHERE connamespace = 'synchro'::regnamespace AND contype <> 'n'
		UNION ALL
		SELECT 'index ' || pg_get_indexdef(i.indexrelid)
		  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'synchro'::regnamespace
		UNION ALL
		SELECT 'type ' || t.typname || ' ' || t.typtype::text || ' '
		       || coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid), '')
		  FROM pg_type t WHERE t.typnamespace = 'synchro'::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')
		UNION ALL
		SELECT 'trigger ' || tgrelid::regclass::text || ' ' || tgname
		  FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'synchro'::regnamespace)`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	rows, err = db.Pool.Query(ctx, `
		SELECT c.relname FROM pg_class c
		 WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind IN ('r', 'p')
		   AND c.relname NOT IN ('server_key', 'goose_version')`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, table := range tables {
		var content string
		where := ""
		if table == "setting" {
			where = ` WHERE t.name <> 'lock_seed'` // derived from the random server key
		}
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) || ' ' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM `+
			pgx.Identifier{"synchro", table}.Sanitize()+` t`+where).Scan(&content))
		out = append(out, "rows "+table+" "+content)
	}
	// The owner is whoever installed: the template's role or the server's superuser.
	var owner string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'synchro'`).Scan(&owner))
	for i := range out {
		out[i] = strings.NewReplacer("{"+owner+"=", "{OWNER=", ","+owner+"=", ",OWNER=", "/"+owner+",", "/OWNER,", "/"+owner+"}", "/OWNER}").Replace(out[i])
	}
	sort.Strings(out)
	return out
}

// requireSameInstall fails with the lines only one of two fingerprints has.
func requireSameInstall(t *testing.T, want, got []string) {
	t.Helper()
	count := map[string]int{}
	for _, l := range want {
		count[l]++
	}
	for _, l := range got {
		count[l]--
	}
	var diff []string
	for l, n := range count {
		switch {
		case n > 0:
			diff = append(diff, "- "+l)
		case n < 0:
			diff = append(diff, "+ "+l)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatalf("not the same install (- fresh, + this one):\n%s", strings.Join(diff, "\n"))
	}
}

// freshFingerprint is the fingerprint of a database installed by this build.
func freshFingerprint(t *testing.T) []string {
	t.Helper()
	return catalogFingerprint(t, testdb.New(t))
}

// appliedVersions lists the versions recorded in synchro.goose_version (0 included).
func appliedVersions(t *testing.T, db *testdb.DB) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT version_id FROM synchro.goose_version ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return out
}

// packVersions is 0 and every migration version of this build, ascending.
func packVersions(t *testing.T) []int64 {
	t.Helper()
	names, err := fs.Glob(synchro.Migrations(), "*.sql")
	require.NoError(t, err)
	sort.Strings(names)
	out := []int64{0}
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		require.NoError(t, err)
		out = append(out, v)
	}
	return out
}

func sortedVersions(v []int64) []int64 {
	out := append([]int64(nil), v...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// relationsIn lists the relations of a schema.
func relationsIn(t *testing.T, db *testdb.DB, schema string) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT relname FROM pg_class WHERE relnamespace = $1::regnamespace ORDER BY relname`, schema)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func serverKey(t *testing.T, db *testdb.DB) []byte {
	t.Helper()
	var k []byte
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT key FROM synchro.server_key`).Scan(&k))
	return k
}

func TestGooseVersionTable(t *testing.T) {
	t.Parallel()

	t.Run("FreshInstallKeepsItInSchemaSynchro", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewEmpty(t)
		require.NoError(t, synchro.Install(context.Background(), db.SQL))
		require.Empty(t, relationsIn(t, db, "public"), "nothing of Synchro in the application's schema")
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		status, err := synchro.Status(context.Background(), db.SQL)
		require.NoError(t, err)
		for _, s := range status {
			require.True(t, s.Applied, s.Name)
		}
	})

	t.Run("StatusOfEmptyDatabaseChangesNothing", func(t *testing.T) {
		t.Parallel()
		db := testdb.NewEmpty(t)
		status, err := synchro.Status(context.Background(), db.SQL)
		require.NoError(t, err)
		require.Len(t, status, len(packVersions(t))-1)
		for _, s := range status {
			require.False(t, s.Applied, s.Name)
		}
		require.Empty(t, relationsIn(t, db, "public"))
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_namespace WHERE nspname = 'synchro'`))
	})

	// An install from before the move (v0.1.0, its table in public) is moved, not
	// re-migrated: its history is kept row for row and only the newer migrations run.
	t.Run("LegacyTableMovedByMigrateUp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		installV010(t, db)
		require.Equal(t, []string{"synchro_goose_version", "synchro_goose_version_id_seq", "synchro_goose_version_pkey"},
			relationsIn(t, db, "public"))
		var legacy []gooseVersion
		rows, err := db.Pool.Query(ctx, `SELECT id, version_id, is_applied, tstamp::text FROM public.synchro_goose_version ORDER BY id`)
		require.NoError(t, err)
		legacy, err = pgx.CollectRows(rows, pgx.RowToStructByPos[gooseVersion])
		require.NoError(t, err)
		key := serverKey(t, db)

		// Status before the move reads the legacy table and changes nothing.
		status, err := synchro.Status(ctx, db.SQL)
		require.NoError(t, err)
		for _, s := range status {
			require.Equal(t, s.Version <= 8, s.Applied, s.Name)
		}
		require.Len(t, relationsIn(t, db, "public"), 3)

		require.NoError(t, synchro.Install(ctx, db.SQL))
		require.Empty(t, relationsIn(t, db, "public"))
		moved := gooseVersions(t, db)
		require.Equal(t, legacy, moved[:len(legacy)], "the legacy history is kept as it was")
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		require.Equal(t, key, serverKey(t, db), "nothing re-migrated from zero")
		requireSameInstall(t, freshFingerprint(t), catalogFingerprint(t, db))
	})

	// goose run by hand with the new table name before the prelude: it made an empty
	// synchro.goose_version and 00001 refused to run over the installed pack; the
	// prelude then drops the empty table and moves the legacy one.
	t.Run("GooseBeforePreludeRefusedThenMoved", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		installV010(t, db)
		p, err := goose.NewProvider(goose.DialectPostgres, db.SQL, synchro.GooseMigrations(), goose.WithTableName(synchro.GooseTable))
		require.NoError(t, err)
		_, err = p.Up(ctx)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55000", pgErr.Code)
		require.Contains(t, pgErr.Message, "already installed")
		require.Equal(t, []int64{0}, appliedVersions(t, db))

		require.NoError(t, synchro.PrepareGoose(ctx, db.SQL))
		require.Empty(t, relationsIn(t, db, "public"))
		require.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8}, appliedVersions(t, db))
		// Now plain goose carries on from the moved history.
		applied := gooseUp(t, db.SQL, synchro.GooseMigrations(), synchro.GooseTable)
		require.Equal(t, packVersions(t)[9:], append([]int64{}, applied...))
		requireSameInstall(t, freshFingerprint(t), catalogFingerprint(t, db))
	})

	// A team upgrading with goose but still the legacy table name: migration 00010 (the
	// last of this build's v0.1.0 successors that cares) stops with the remedy, the rest
	// of the history stays in one table; the prelude and goose with the new name finish.
	t.Run("GooseWithLegacyNameRefused", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		installV010(t, db)
		p, err := goose.NewProvider(goose.DialectPostgres, db.SQL, synchro.GooseMigrations(), goose.WithTableName("synchro_goose_version"))
		require.NoError(t, err)
		_, err = p.Up(ctx)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55000", pgErr.Code)
		require.Contains(t, pgErr.Message, "synchro migrations prelude")
		require.NoError(t, synchro.PrepareGoose(ctx, db.SQL))
		gooseUp(t, db.SQL, synchro.GooseMigrations(), synchro.GooseTable)
		require.Equal(t, packVersions(t), sortedVersions(appliedVersions(t, db)))
		requireSameInstall(t, freshFingerprint(t), catalogFingerprint(t, db))
	})

	t.Run("TwoHistoriesRefused", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.New(t)
		mustExec(t, db, `CREATE TABLE public.synchro_goose_version (LIKE synchro.goose_version INCLUDING ALL);
			INSERT INTO public.synchro_goose_version (version_id, is_applied) VALUES (0, true), (1, true)`)
		err := synchro.Install(ctx, db.SQL)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55000", pgErr.Code)
		require.Equal(t, packVersions(t), appliedVersions(t, db), "nothing moved")
	})
}

// The pack as a goose source: plain goose installs exactly what `synchro migrate up`
// installs, into the same history, and each tool carries on from the other's.
func TestGooseSource(t *testing.T) {
	t.Parallel()

	t.Run("PlainGooseEqualsMigrateUp", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		require.NoError(t, synchro.PrepareGoose(ctx, db.SQL))
		applied := gooseUp(t, db.SQL, synchro.GooseMigrations(), synchro.GooseTable)
		require.Equal(t, packVersions(t)[1:], applied)
		require.Empty(t, relationsIn(t, db, "public"))
		want := freshFingerprint(t)
		requireSameInstall(t, want, catalogFingerprint(t, db))
		// migrate up after goose: nothing left to migrate, same install.
		require.NoError(t, synchro.Install(ctx, db.SQL))
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		requireSameInstall(t, want, catalogFingerprint(t, db))
		// goose after migrate up: nothing to apply.
		require.Empty(t, gooseUp(t, db.SQL, synchro.GooseMigrations(), synchro.GooseTable))
	})

	t.Run("ExportedFilesEqualTheSource", func(t *testing.T) {
		t.Parallel()
		// What `synchro migrations export` writes is GooseMigrations: checked file by file
		// through goose's own parser (every statement of the last migration).
		src := synchro.GooseMigrations()
		names, err := fs.Glob(src, "*.sql")
		require.NoError(t, err)
		require.Len(t, names, len(packVersions(t))-1)
		last, err := fs.ReadFile(src, names[len(names)-1])
		require.NoError(t, err)
		fnames, err := fs.Glob(synchro.Functions(), "*.sql")
		require.NoError(t, err)
		for _, n := range fnames {
			require.Contains(t, string(last), "-- function file "+n+"\n", "the final migration re-applies %s", n)
		}
		for _, n := range names[:len(names)-1] {
			got, err := fs.ReadFile(src, n)
			require.NoError(t, err)
			orig, err := fs.ReadFile(synchro.Migrations(), n)
			require.NoError(t, err)
			// The source plus the search_path pin that opens and closes its Up section
			// (synchro.PinSearchPath says why).
			lines := strings.Split(string(got), "\n")
			require.Contains(t, lines[1], "pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true)", n)
			var kept []string
			for _, l := range lines {
				if !strings.Contains(l, "synchro.install_search_path") {
					kept = append(kept, l)
				}
			}
			require.Equal(t, string(orig), strings.Join(kept, "\n"), n)
		}
	})
}

// A goose version runs once, and the function files ride on a release's last
// migration: a tree whose function files differ from the newest frozen release must
// have a migration newer than that release's last one, or goose users would keep the
// release's functions. (Add an empty migration saying why, if nothing else changes.)
func TestReleaseFunctionsNeedMigration(t *testing.T) {
	t.Parallel()
	rel := os.DirFS(releaseDir(newestRelease))
	relNames, err := fs.Glob(rel, "*.sql")
	require.NoError(t, err)
	sort.Strings(relNames)
	relLast, err := goose.NumericComponent(relNames[len(relNames)-1])
	require.NoError(t, err)
	relFinal, err := fs.ReadFile(rel, relNames[len(relNames)-1])
	require.NoError(t, err)

	// The release's function files, as its final migration carries them.
	fnames, err := fs.Glob(synchro.Functions(), "*.sql")
	require.NoError(t, err)
	same := true
	for _, n := range fnames {
		b, err := fs.ReadFile(synchro.Functions(), n)
		require.NoError(t, err)
		block := "-- function file " + n + "\n-- +goose StatementBegin\n" + strings.TrimRight(string(b), "\n") + "\n-- +goose StatementEnd\n"
		if !strings.Contains(string(relFinal), block) {
			same = false
		}
	}
	if strings.Count(string(relFinal), "-- function file ") != len(fnames) {
		same = false
	}
	versions := packVersions(t)
	if !same {
		require.Greater(t, versions[len(versions)-1], relLast,
			"function files changed since %s: add a migration (sql/migrations) so goose users get them", newestRelease)
	}
}

// `synchro sql` installs, upgrades and, applied again, changes nothing.
func TestSQLScriptUpgrades(t *testing.T) {
	t.Parallel()
	script, err := synchro.SQL()
	require.NoError(t, err)

	t.Run("EmptyDatabaseTwice", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		require.NoError(t, applyScript(ctx, t, db.URL, script))
		want := freshFingerprint(t)
		requireSameInstall(t, want, catalogFingerprint(t, db))
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		before := gooseVersions(t, db)
		require.NoError(t, applyScript(ctx, t, db.URL, script))
		requireSameInstall(t, want, catalogFingerprint(t, db))
		require.Equal(t, before, gooseVersions(t, db))
		// The history is goose's: migrate up and plain goose find nothing to do.
		require.NoError(t, synchro.Install(ctx, db.SQL))
		require.Empty(t, gooseUp(t, db.SQL, synchro.GooseMigrations(), synchro.GooseTable))
		require.Equal(t, before, gooseVersions(t, db))
	})

	// A rollback deploy: the script of an older release against a database of a newer
	// one is refused (SY400) and changes nothing; synchro.Install refuses it too
	// (ErrNewerDatabase). Before, both re-applied the older functions over the newer
	// release's and reported success (found by review).
	t.Run("RefusesNewerDatabase", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.New(t)
		mustExec(t, db, `INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (99999, true);
			ALTER FUNCTION synchro._pl_ident(name) RENAME TO _pl_ident_99999`)
		err := applyScript(ctx, t, db.URL, script)
		require.Error(t, err)
		require.Contains(t, err.Error(), "99999")
		err = synchro.Install(ctx, db.SQL)
		require.ErrorIs(t, err, synchro.ErrNewerDatabase)
		// Nothing re-applied: the function this release "renamed" is not made again.
		require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_proc WHERE proname = '_pl_ident'
			AND pronamespace = 'synchro'::regnamespace`))
		st, err := synchro.Status(ctx, db.SQL)
		require.NoError(t, err)
		require.Equal(t, int64(99999), st[len(st)-1].Version)
		require.True(t, st[len(st)-1].Applied)
	})

	// As a team applies it: psql -f, twice, on a v0.1.0 install.
	t.Run("ThroughPsql", func(t *testing.T) {
		t.Parallel()
		psql := ""
		for _, p := range []string{filepath.Join(os.Getenv("SYNCHRO_PG_BIN"), "psql"), "/usr/lib/postgresql/15/bin/psql"} {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				psql = p
				break
			}
		}
		if psql == "" {
			var err error
			if psql, err = exec.LookPath("psql"); err != nil {
				t.Skip("no psql binary")
			}
		}
		db := testdb.NewEmpty(t)
		installV010(t, db)
		file := filepath.Join(t.TempDir(), "synchro.sql")
		require.NoError(t, os.WriteFile(file, []byte(script), 0o644))
		for range 2 {
			out, err := exec.Command(psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db.URL, "-f", file).CombinedOutput()
			require.NoError(t, err, "%s", out)
		}
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		requireSameInstall(t, freshFingerprint(t), catalogFingerprint(t, db))
	})

	t.Run("UpgradesV010Twice", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.NewEmpty(t)
		installV010(t, db)
		key := serverKey(t, db)
		require.NoError(t, applyScript(ctx, t, db.URL, script))
		require.Empty(t, relationsIn(t, db, "public"))
		require.Equal(t, packVersions(t), appliedVersions(t, db))
		require.Equal(t, key, serverKey(t, db))
		want := freshFingerprint(t)
		requireSameInstall(t, want, catalogFingerprint(t, db))
		require.NoError(t, applyScript(ctx, t, db.URL, script))
		requireSameInstall(t, want, catalogFingerprint(t, db))
		require.Equal(t, packVersions(t), appliedVersions(t, db))
	})

	t.Run("CurrentInstallUnchanged", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := testdb.New(t)
		before := gooseVersions(t, db)
		want := catalogFingerprint(t, db)
		require.NoError(t, applyScript(ctx, t, db.URL, script))
		require.Equal(t, before, gooseVersions(t, db))
		requireSameInstall(t, want, catalogFingerprint(t, db))
	})
}

// Re-running an install (migrate up, `synchro sql`) while the application holds a write
// transaction on a registered table must not wait for it: the fences are current, so
// no trigger DDL (SHARE ROW EXCLUSIVE on the table) runs. A trigger that is not as
// the install makes it (disabled here) is still repaired, and that does take the lock.
func TestInstallLeavesCurrentTriggersAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	script, err := synchro.SQL()
	require.NoError(t, err)

	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `INSERT INTO items VALUES (1, 'a')`)
	require.NoError(t, err)

	// lock_timeout turns a wait for the held transaction into an error (55P03).
	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET lock_timeout = '500ms'`)
	require.NoError(t, err)
	require.NoError(t, applyScript(ctx, t, db.URL+"&options=-c%20lock_timeout%3D500ms", script))
	_, err = conn.ExecContext(ctx, `SELECT synchro._refresh_fences()`)
	require.NoError(t, err)

	// A disabled fence is repaired: that needs the table lock, so it waits for the held
	// transaction (and times out while it is open).
	require.NoError(t, held.Rollback(ctx))
	mustExec(t, db, `ALTER TABLE items DISABLE TRIGGER synchro_fence_update`)
	held, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `INSERT INTO items VALUES (2, 'a')`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `SELECT synchro._refresh_fences()`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code)
	require.NoError(t, held.Rollback(ctx))
	_, err = conn.ExecContext(ctx, `SELECT synchro._refresh_fences()`)
	require.NoError(t, err)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'items'::regclass
		AND tgname = 'synchro_fence_update' AND tgenabled = 'O'`))
}

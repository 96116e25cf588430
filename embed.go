// Package synchro embeds Synchro's SQL pack and installs it.
//
// The pack has two layers. sql/migrations holds versioned goose migrations for state
// (schema, tables, types, roles and the DROP FUNCTION a signature change needs).
// sql/functions holds every function once, one per file, re-applied on every install.
// Install is the single entry point the CLI (`synchro migrate up`), the tests and the
// pgtestdb migrator all use.
package synchro

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/pressly/goose/v3"
)

//go:embed sql/migrations/*.sql
var migrationFiles embed.FS

//go:embed sql/functions/*.sql
var functionFiles embed.FS

// InstallLockID is the advisory lock key every installer takes, so concurrent deploys
// take turns: `synchro migrate up` (a session lock), `synchro sql` and `synchro
// migrations prelude` (transaction locks). goose's own default lock id differs: a team
// running goose's Provider passes this one to goose's session locker
// (lock.WithLockID(synchro.InstallLockID)) to take turns with them.
const InstallLockID = 5887940537704921958

// Migrations returns the versioned migration files.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "sql/migrations")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder exists
	}
	return sub
}

// Functions returns the function files, re-applied in name order on every install.
func Functions() fs.FS {
	sub, err := fs.Sub(functionFiles, "sql/functions")
	if err != nil {
		panic(err)
	}
	return sub
}

// Hash identifies the complete pack: every migration and function file, by name and
// content. The test harness keys its template database on it.
func Hash() string {
	h := sha256.New()
	for _, f := range []fs.FS{Migrations(), Functions()} {
		names, _ := fs.Glob(f, "*.sql")
		sort.Strings(names)
		for _, n := range names {
			b, _ := fs.ReadFile(f, n)
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Install applies pending migrations and re-applies every function file, all under one
// session-level advisory lock (InstallLockID): concurrent installers
// serialize instead of failing with "tuple concurrently updated".
func Install(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("install: connect: %w", err)
	}
	defer conn.Close()
	// The search_path pinned on this connection for the whole install, restored after:
	// the install runs as a privileged role, and an application that owns the database
	// (so public, or a search_path set on the database) could otherwise put a better
	// overload of a function or operator the install calls in front of pg_catalog's
	// (an untyped pg_advisory_lock($1) preferred public.pg_advisory_lock(float8)) and
	// run it as the installer. The calls are qualified too.
	var saved string
	if err := conn.QueryRowContext(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&saved); err != nil {
		return fmt.Errorf("install: search_path: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', false)`); err != nil {
		return fmt.Errorf("install: search_path: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_catalog.set_config('search_path', $1, false)`, saved)
	}()
	// A blocking session-level advisory lock: concurrent installers queue on it instead
	// of polling (goose's session locker, given InstallLockID, takes the same key).
	if _, err := conn.ExecContext(ctx, "SELECT pg_catalog.pg_advisory_lock($1::pg_catalog.int8)", InstallLockID); err != nil {
		return fmt.Errorf("install: lock: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_advisory_unlock($1::pg_catalog.int8)", InstallLockID)
	}()

	// Schema synchro first (goose's version table lives in it), and an install from
	// before the table moved keeps its history.
	var fresh bool
	if err := conn.QueryRowContext(ctx, `SELECT pg_catalog.to_regnamespace('synchro') IS NULL`).Scan(&fresh); err != nil {
		return fmt.Errorf("install: schema: %w", err)
	}
	if err := runPrelude(ctx, conn); err != nil {
		return err
	}
	if err := refuseNewer(ctx, conn); err != nil {
		return err
	}
	provider, err := newProvider(db, GooseTable)
	if err != nil {
		return err
	}
	if _, err := provider.Up(ctx); err != nil {
		if fresh {
			undoEmptyInstall(ctx, conn)
		}
		return fmt.Errorf("install: migrate: %w", err)
	}
	return applyFunctions(ctx, conn)
}

// undoEmptyInstall drops what a first install that applied no migration left: the
// schema the prelude made and goose's version table in it. Each migration commits on
// its own, so a first migration refused (a deploy role without a privilege the pack
// needs) left only those two, owned by the deploy role, and the corrected deploy (the
// same command as a superuser) was then refused for a schema of another role
// (TestDeployEdgeFailedInstallLeavesNothing). Anything more in the schema (a migration
// applied, an object someone made meanwhile) and nothing is dropped: the DROP SCHEMA
// without CASCADE fails and the transaction rolls back. Best effort: the install's
// own error is what the caller reports.
func undoEmptyInstall(ctx context.Context, conn *sql.Conn) {
	ctx = context.WithoutCancel(ctx)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return
	}
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `DO $synchro_undo$
BEGIN
  IF pg_catalog.to_regclass('synchro.goose_version') IS NOT NULL THEN
    IF EXISTS (SELECT FROM synchro.goose_version WHERE version_id OPERATOR(pg_catalog.>) 0) THEN
      RETURN;
    END IF;
    DROP TABLE synchro.goose_version;
  END IF;
  DROP SCHEMA synchro;
END
$synchro_undo$`)
	if err == nil {
		_ = tx.Commit()
	}
}

// ErrNewerDatabase: the database records a migration newer than this build's newest.
// Install refuses it (a rollback deploy of an older binary): goose has nothing to
// apply, and re-applying this build's function files would silently replace the
// newer release's. Run the newer binary; a downgrade is not supported.
var ErrNewerDatabase = errors.New("install: the database has a newer Synchro release than this binary")

// newestMigration is the version of the newest embedded migration.
func newestMigration() (int64, error) {
	names, err := fs.Glob(Migrations(), "*.sql")
	if err != nil || len(names) == 0 {
		return 0, fmt.Errorf("install: no embedded migrations: %v", err)
	}
	sort.Strings(names)
	return goose.NumericComponent(names[len(names)-1])
}

// downgradeGuard is the SQL that refuses a database newer than this build: the newest
// version recorded in synchro.goose_version above newest. Shared by Install and the
// script of SQL.
func downgradeGuard(newest int64) string {
	return fmt.Sprintf(`DO $synchro_downgrade$
DECLARE
  v bigint;
BEGIN
  IF pg_catalog.to_regclass('synchro.goose_version') IS NOT NULL THEN
    EXECUTE 'SELECT pg_catalog.max(version_id) FROM synchro.goose_version WHERE is_applied' INTO v;
    IF v OPERATOR(pg_catalog.>) %d THEN
      RAISE EXCEPTION 'synchro: the database has migration %%, newer than this release''s newest (%d): run the newer release; a downgrade is not supported', v
        USING ERRCODE = 'SY400';
    END IF;
  END IF;
END
$synchro_downgrade$;
`, newest, newest)
}

// refuseNewer fails with ErrNewerDatabase when the database records a newer migration.
func refuseNewer(ctx context.Context, conn *sql.Conn) error {
	newest, err := newestMigration()
	if err != nil {
		return err
	}
	var exists bool
	if err := conn.QueryRowContext(ctx,
		`SELECT pg_catalog.to_regclass('synchro.goose_version') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("install: version: %w", err)
	}
	if !exists {
		return nil
	}
	var v sql.NullInt64
	if err := conn.QueryRowContext(ctx,
		`SELECT pg_catalog.max(version_id) FROM synchro.goose_version WHERE is_applied`).Scan(&v); err != nil {
		return fmt.Errorf("install: version: %w", err)
	}
	if v.Valid && v.Int64 > newest {
		return fmt.Errorf("%w: it has migration %d, this binary's newest is %d", ErrNewerDatabase, v.Int64, newest)
	}
	return nil
}

// MigrationStatus is one migration's state, for `synchro migrate status`.
type MigrationStatus struct {
	Version int64
	Name    string
	Applied bool
}

// Status reports which migrations are applied. It changes nothing: it reads the version
// table where it is (GooseTable, or the legacy table of an install not yet moved), and
// reports every migration pending when there is none (goose would create one).
func Status(ctx context.Context, db *sql.DB) ([]MigrationStatus, error) {
	var table string
	err := db.QueryRowContext(ctx, `
		SELECT coalesce(
		  (SELECT 'synchro.goose_version' WHERE pg_catalog.to_regclass('synchro.goose_version') IS NOT NULL),
		  (SELECT n.nspname || '.synchro_goose_version'
		     FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		    WHERE c.relname = 'synchro_goose_version' AND c.relkind = 'r' AND n.nspname <> 'synchro'
		      AND n.nspname NOT LIKE 'pg\_temp\_%' ORDER BY n.nspname <> 'public', n.nspname LIMIT 1),
		  '')`).Scan(&table)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	if table == "" {
		names, err := fs.Glob(Migrations(), "*.sql")
		if err != nil {
			return nil, err
		}
		sort.Strings(names)
		out := make([]MigrationStatus, 0, len(names))
		for _, n := range names {
			v, err := goose.NumericComponent(n)
			if err != nil {
				return nil, err
			}
			out = append(out, MigrationStatus{Version: v, Name: n})
		}
		return out, nil
	}
	provider, err := newProvider(db, table)
	if err != nil {
		return nil, err
	}
	st, err := provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate status: %w", err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		out = append(out, MigrationStatus{
			Version: s.Source.Version,
			Name:    s.Source.Path,
			Applied: s.State == goose.StateApplied,
		})
	}
	// Versions a newer release recorded (goose lists only the embedded ones): shown, so
	// an operator sees that this binary is older than the database.
	if table == GooseTable {
		newest, err := newestMigration()
		if err != nil {
			return nil, err
		}
		rows, err := db.QueryContext(ctx, `SELECT DISTINCT version_id FROM synchro.goose_version
			WHERE is_applied AND version_id > $1 ORDER BY version_id`, newest)
		if err != nil {
			return nil, fmt.Errorf("migrate status: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				return nil, fmt.Errorf("migrate status: %w", err)
			}
			out = append(out, MigrationStatus{Version: v, Name: "(newer than this binary: upgrade it)", Applied: true})
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("migrate status: %w", err)
		}
	}
	return out, nil
}

func newProvider(db *sql.DB, table string) (*goose.Provider, error) {
	src, err := pinnedMigrations(Migrations())
	if err != nil {
		return nil, fmt.Errorf("install: goose: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, src, goose.WithTableName(table))
	if err != nil {
		return nil, fmt.Errorf("install: goose: %w", err)
	}
	return p, nil
}

// runPrelude runs GoosePrelude in a transaction of its own on conn (its search_path is
// pinned for that transaction only).
func runPrelude(ctx context.Context, conn *sql.Conn) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("install: goose prelude: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, GoosePrelude); err != nil {
		return fmt.Errorf("install: goose prelude: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("install: goose prelude: %w", err)
	}
	return nil
}

// applyFunctions re-applies every function file in one transaction on the locked
// connection, so a failed file leaves the previous definitions in place.
func applyFunctions(ctx context.Context, conn *sql.Conn) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("install: functions: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, PinSearchPath); err != nil {
		return fmt.Errorf("install: functions: %w", err)
	}
	names, err := fs.Glob(Functions(), "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(Functions(), n)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, string(b)); err != nil {
			return fmt.Errorf("install: function file %s: %w", n, err)
		}
	}
	// Fence functions are generated per relation from a template: regenerate them so a
	// changed template reaches relations registered by an older install.
	if _, err := tx.ExecContext(ctx, refreshFences); err != nil {
		return fmt.Errorf("install: refresh fences: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("install: functions: %w", err)
	}
	return nil
}

// refreshFences regenerates every registered relation's fence after the function files.
const refreshFences = "SELECT synchro._refresh_fences()"

// SQL returns the install-or-upgrade script for teams that apply SQL with another
// migrator: applied to an empty database it installs the pack, applied to an installed
// one (of any earlier release, however installed) it upgrades it to this release, and
// applied again it changes nothing. One transaction under the install lock: the goose
// prelude, then each migration not yet recorded in synchro.goose_version (applied and
// recorded there exactly as goose would, so `synchro migrate up` and goose carry on from
// it), then every function file and the fence refresh.
func SQL() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "-- Synchro install-or-upgrade script for pack %s (generated by `synchro sql`).\n"+
		"-- Installs into an empty database, upgrades an installed pack to this release, and is a\n"+
		"-- no-op when applied again (docs/install.md). Apply it whole, e.g. psql -v ON_ERROR_STOP=1 -f.\n"+
		"BEGIN;\n-- The install lock (synchro.InstallLockID): concurrent deploys take turns.\n"+
		"SELECT pg_catalog.pg_advisory_xact_lock(%d::pg_catalog.int8);\n\n%s", Hash()[:12], InstallLockID, GoosePrelude)
	newest, err := newestMigration()
	if err != nil {
		return "", err
	}
	b.WriteString("\n-- A database of a newer release is refused: this script would replace its functions.\n")
	b.WriteString(downgradeGuard(newest))
	// goose's own DDL for its Postgres version table, and its version-0 row, so goose
	// finds the table it would have made.
	b.WriteString(`
DO $synchro_goose_table$
BEGIN
  IF pg_catalog.to_regclass('synchro.goose_version') IS NULL THEN
    CREATE TABLE synchro.goose_version (
      id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
      version_id bigint NOT NULL,
      is_applied boolean NOT NULL,
      tstamp timestamp NOT NULL DEFAULT now()
    );
    INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (0, true);
  END IF;
END
$synchro_goose_table$;
`)
	names, _ := fs.Glob(Migrations(), "*.sql")
	sort.Strings(names)
	for _, n := range names {
		src, err := fs.ReadFile(Migrations(), n)
		if err != nil {
			return "", err
		}
		version, err := goose.NumericComponent(n)
		if err != nil {
			return "", err
		}
		if strings.Contains(string(src), "+goose NO TRANSACTION") {
			return "", fmt.Errorf("sql: migration %s runs outside a transaction", n)
		}
		up := gooseUp(string(src))
		const tag = "$synchro_migration_body$"
		if strings.Contains(up, tag) || strings.Contains(up, "$synchro_migration$") {
			return "", fmt.Errorf("sql: migration %s contains %s", n, tag)
		}
		// EXECUTE runs the migration's statements as one multi-statement string, only
		// when goose has not recorded the version.
		fmt.Fprintf(&b, "\n-- migration %s\nDO $synchro_migration$\nBEGIN\n"+
			"  IF NOT EXISTS (SELECT FROM synchro.goose_version WHERE version_id = %d) THEN\n"+
			"    EXECUTE %s%s%s;\n"+
			"    INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (%d, true);\n"+
			"  END IF;\nEND\n$synchro_migration$;\n", n, version, tag, up, tag, version)
	}
	names, _ = fs.Glob(Functions(), "*.sql")
	sort.Strings(names)
	for _, n := range names {
		src, err := fs.ReadFile(Functions(), n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- function file %s\n%s\n", n, src)
	}
	fmt.Fprintf(&b, "\n%s;\n", refreshFences)
	b.WriteString("\nCOMMIT;\n")
	return b.String(), nil
}

// gooseUp keeps the Up section of a goose migration, without goose's annotations.
func gooseUp(src string) string {
	var out []string
	up := false
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(t, "-- +goose Up"):
			up = true
			continue
		case strings.HasPrefix(t, "-- +goose Down"):
			up = false
			continue
		case strings.HasPrefix(t, "-- +goose "):
			continue
		}
		if up {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// PackVersion is the newest migration this release ships: the version goose records in
// synchro.goose_version once the pack is migrated to this release. The runner runs only
// against a pack no newer than it (synchro.runner_pack_version).
func PackVersion() int64 {
	names, _ := fs.Glob(Migrations(), "*.sql")
	var v int64
	for _, n := range names {
		num, _, ok := strings.Cut(n, "_")
		if !ok {
			continue
		}
		if x, err := strconv.ParseInt(num, 10, 64); err == nil && x > v {
			v = x
		}
	}
	return v
}

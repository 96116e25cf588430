package synchro

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"testing/fstest"
)

// GooseTable is the goose version table of the pack, in schema synchro so it never lands
// in the application's schema. Pass it to goose.WithTableName (or goose's -table flag).
// Installs made before it moved kept a table named synchro_goose_version in the
// installer's schema (usually public); GoosePrelude moves that table here.
const GooseTable = "synchro.goose_version"

// GoosePrelude is the SQL to run once before goose touches the pack's version table: goose
// creates GooseTable before it applies the first migration, so the schema must exist,
// and an install from before the move keeps its history (its table is moved and renamed,
// never re-migrated from zero). Idempotent; `synchro migrate up` and `synchro sql` run it
// themselves. Run it under the install lock (InstallLockID) when deploys can overlap:
// PrepareGoose does, and `synchro migrations prelude` prints it wrapped in one.
//
// Three cases:
//   - no legacy table: only the schema is made (an empty schema when nothing is
//     installed; migration 00001 fills it);
//   - a legacy table and no synchro.goose_version: the legacy table moves;
//   - both: when synchro.goose_version records no migration (a goose run that created it
//     before this prelude ran) it is dropped and the legacy table moves; otherwise the
//     two histories disagree and the prelude stops with SQLSTATE 55000 instead of
//     guessing.
const GoosePrelude = `-- Synchro goose prelude (docs/install.md): the database is UTF8, and schema synchro
-- exists and holds the pack's goose version table, synchro.goose_version.
--
-- Run in a transaction: the search_path is pinned for it, as for every migration and
-- the function files (PinSearchPath says why).
` + PinSearchPath + `
--
-- UTF8 only: the runner reads row values, keys and messages as UTF-8. In a SQL_ASCII
-- database any byte sequence is text, and in LATIN1 (or another single-byte encoding)
-- the decoders and the fence messages disagree on a non-ASCII value's bytes: one
-- INSERT of such a value by any writer was quarantined, under both decoders
-- (TestInstallRefusesNonUTF8Database).
DO $synchro_encoding$
BEGIN
  IF pg_catalog.getdatabaseencoding() <> 'UTF8' THEN
    RAISE EXCEPTION 'synchro: the database encoding must be UTF8 (found %)', pg_catalog.getdatabaseencoding()
      USING ERRCODE = 'SY400';
  END IF;
END
$synchro_encoding$;
-- A schema synchro someone else made is never adopted: its owner could replace any of
-- the pack's functions (TestInstallRefusesForeignSchema). Only the installer or a
-- superuser may own it.
DO $synchro_schema$
BEGIN
  IF EXISTS (SELECT FROM pg_catalog.pg_namespace n JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
              WHERE n.nspname OPERATOR(pg_catalog.=) 'synchro'
                AND r.rolname OPERATOR(pg_catalog.<>) CURRENT_USER AND NOT r.rolsuper) THEN
    RAISE EXCEPTION 'synchro: schema synchro exists and belongs to another role; the pack installs only into a schema of its own'
      USING ERRCODE = 'SY400';
  END IF;
END
$synchro_schema$;
CREATE SCHEMA IF NOT EXISTS synchro;
DO $synchro_prelude$
DECLARE
  legacy regclass;
  found  int;
  used   boolean;
BEGIN
  -- goose created the legacy table unqualified, in the installer's current schema: look
  -- for it in every schema but synchro and the temporary ones. Only a plain table the
  -- installer (or a superuser) owns, with no trigger, rule or row security, is the
  -- pack's: a table of that name an application role made is not adopted (its trigger
  -- ran as the installer at every version goose recorded, and it kept owning the
  -- pack's history: TestInstallIgnoresForeignLegacyGooseTable), nor does it block an
  -- upgrade.
  SELECT pg_catalog.count(*), pg_catalog.min(c.oid::pg_catalog.regclass::pg_catalog.text)::pg_catalog.regclass
    INTO found, legacy
    FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_catalog.pg_roles o ON o.oid = c.relowner
   WHERE c.relname OPERATOR(pg_catalog.=) 'synchro_goose_version' AND c.relkind OPERATOR(pg_catalog.=) 'r'
     AND n.nspname OPERATOR(pg_catalog.<>) 'synchro' AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_temp\_%'
     AND n.nspname OPERATOR(pg_catalog.!~~) 'pg\_toast\_temp\_%'
     AND (o.rolname OPERATOR(pg_catalog.=) CURRENT_USER OR o.rolsuper)
     AND NOT c.relhastriggers AND NOT c.relhasrules AND NOT c.relrowsecurity;
  IF found = 0 THEN
    RETURN;
  END IF;
  IF found > 1 THEN
    RAISE EXCEPTION 'synchro: more than one legacy goose table synchro_goose_version; move the one of this install: ALTER TABLE ... SET SCHEMA synchro, then RENAME TO goose_version'
      USING ERRCODE = '55000';
  END IF;
  IF pg_catalog.to_regclass('synchro.goose_version') IS NOT NULL THEN
    EXECUTE 'SELECT EXISTS (SELECT FROM synchro.goose_version WHERE version_id > 0)' INTO used;
    IF used THEN
      RAISE EXCEPTION 'synchro: both synchro.goose_version and a legacy synchro_goose_version record migrations; keep one (docs/install.md)'
        USING ERRCODE = '55000';
    END IF;
    -- Made by a goose run before this prelude: it holds goose's version 0 row only.
    DROP TABLE synchro.goose_version;
  END IF;
  EXECUTE pg_catalog.format('ALTER TABLE %s SET SCHEMA synchro', legacy);
  ALTER TABLE synchro.synchro_goose_version RENAME TO goose_version;
  -- Its key index and id sequence carry the old name: give them goose's names for the
  -- new table, so a moved install matches a fresh one.
  IF pg_catalog.to_regclass('synchro.synchro_goose_version_pkey') IS NOT NULL THEN
    ALTER INDEX synchro.synchro_goose_version_pkey RENAME TO goose_version_pkey;
  END IF;
  IF pg_catalog.to_regclass('synchro.synchro_goose_version_id_seq') IS NOT NULL THEN
    ALTER SEQUENCE synchro.synchro_goose_version_id_seq RENAME TO goose_version_id_seq;
  END IF;
  -- Private like every table of the schema (migration 00007 revoked PUBLIC from the
  -- tables there; this one was elsewhere then).
  REVOKE ALL ON synchro.goose_version FROM PUBLIC;
  IF pg_catalog.to_regclass('synchro.goose_version_id_seq') IS NOT NULL THEN
    REVOKE ALL ON SEQUENCE synchro.goose_version_id_seq FROM PUBLIC;
  END IF;
END
$synchro_prelude$;
`

// PinSearchPath is the first statement of the goose prelude, of the function files'
// transaction and of the `synchro sql` script. The install runs as the pack owner,
// often a superuser, and an unqualified call resolved through the installer's
// search_path found a better-matching overload an application role had created in
// public (format(text, name, name) over pg_catalog's VARIADIC one): it ran as the
// installer, and a view made then kept calling it as every reader
// (TestInstallPinsSearchPath). SET LOCAL: it ends with the transaction, and the
// caller's connection keeps its own path.
const PinSearchPath = "SET LOCAL search_path = pg_catalog, pg_temp;"

// pinMigration and unpinMigration open and close every migration's Up section (pinUp):
// the same pin for the migration's statements, then the caller's path again for what
// goose does after them in the same transaction (its version row, in a table the
// caller may name unqualified).
const (
	pinMigration = "SELECT pg_catalog.set_config('synchro.install_search_path', pg_catalog.current_setting('search_path'), true), " +
		"pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);"
	unpinMigration = "SELECT pg_catalog.set_config('search_path', pg_catalog.current_setting('synchro.install_search_path'), true);"
)

// GooseMigrations is the pack as a goose migration source: every migration of
// sql/migrations under its own version, and the last one also re-applies every function
// file of this release (and regenerates the fences of registered relations). Run it with
// goose's Provider beside the application's own migrations, with its own version table:
//
//	err := synchro.PrepareGoose(ctx, db)
//	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(synchro.InstallLockID))
//	p, err := goose.NewProvider(goose.DialectPostgres, db, synchro.GooseMigrations(),
//		goose.WithTableName(synchro.GooseTable), goose.WithSessionLocker(locker))
//	_, err = p.Up(ctx)
//
// (docs/install.md has the whole example).
//
// `synchro migrations export DIR` writes the same files for goose's command. The version
// of a migration never changes between releases, so `synchro migrate up`, `synchro sql`
// and goose with this source share one history.
func GooseMigrations() fs.FS {
	src, err := GooseSource(Migrations(), Functions())
	if err != nil {
		panic(err) // the embedded pack is checked by the tests
	}
	return src
}

// GooseSource builds the goose source of a pack: migrations holds the goose migration
// files (NNNNN_name.sql), functions the function files. GooseMigrations is
// GooseSource(Migrations(), Functions()); release artifacts (tests/testdata/releases)
// are GooseSource of an older tree.
func GooseSource(migrations, functions fs.FS) (fs.FS, error) {
	names, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("goose source: no migrations")
	}
	sort.Strings(names)
	out := fstest.MapFS{}
	for _, n := range names[:len(names)-1] {
		b, err := fs.ReadFile(migrations, n)
		if err != nil {
			return nil, err
		}
		out[n] = &fstest.MapFile{Data: []byte(pinUp(string(b))), Mode: 0o644}
	}
	last := names[len(names)-1]
	b, err := fs.ReadFile(migrations, last)
	if err != nil {
		return nil, err
	}
	final, err := finalMigration(string(b), functions)
	if err != nil {
		return nil, fmt.Errorf("goose source: %s: %w", last, err)
	}
	out[last] = &fstest.MapFile{Data: []byte(pinUp(final)), Mode: 0o644}
	return out, nil
}

// pinnedMigrations is migrations with PinSearchPath in each Up section (pinUp): the
// source Install gives goose (the function files follow in a transaction of their own).
func pinnedMigrations(migrations fs.FS) (fs.FS, error) {
	names, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		return nil, err
	}
	out := fstest.MapFS{}
	for _, n := range names {
		b, err := fs.ReadFile(migrations, n)
		if err != nil {
			return nil, err
		}
		out[n] = &fstest.MapFile{Data: []byte(pinUp(string(b))), Mode: 0o644}
	}
	return out, nil
}

// pinUp opens a migration's Up section with pinMigration and closes it with
// unpinMigration (right before "-- +goose Down", or at the end). A migration that runs
// outside a transaction gets nothing (none of the pack's does).
func pinUp(src string) string {
	if strings.Contains(src, "+goose NO TRANSACTION") {
		return src
	}
	lines := strings.SplitAfter(src, "\n")
	up, down := -1, len(lines)
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if up < 0 && strings.HasPrefix(t, "-- +goose Up") {
			up = i
		} else if up >= 0 && strings.HasPrefix(t, "-- +goose Down") {
			down = i
			break
		}
	}
	if up < 0 {
		return src
	}
	var b strings.Builder
	b.WriteString(strings.Join(lines[:up+1], ""))
	b.WriteString(pinMigration + "\n")
	body := strings.Join(lines[up+1:down], "")
	b.WriteString(body)
	if body != "" && !strings.HasSuffix(body, "\n") {
		b.WriteString("\n")
	}
	b.WriteString(unpinMigration + "\n")
	b.WriteString(strings.Join(lines[down:], ""))
	return b.String()
}

// finalMigration appends the function files (and the fence refresh) to the Up section of
// the release's last migration. A goose version runs once, so the function files ride
// on the newest migration: an install that has it has this release's functions. A
// release whose functions changed therefore needs a migration of its own
// (TestReleaseFunctionsNeedMigration checks it against the newest frozen release).
func finalMigration(src string, functions fs.FS) (string, error) {
	if strings.Contains(src, "+goose NO TRANSACTION") {
		return "", fmt.Errorf("the last migration runs outside a transaction; the function files cannot ride on it")
	}
	lines := strings.SplitAfter(src, "\n")
	down := len(lines)
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "-- +goose Down") {
			down = i
			break
		}
	}
	names, err := fs.Glob(functions, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var b strings.Builder
	for _, l := range lines[:down] {
		b.WriteString(l)
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteString("\n")
	}
	b.WriteString("\n-- The function files of this release (sql/functions), re-applied: generated by\n" +
		"-- `synchro migrations export`. Each file is one goose statement (its bodies hold semicolons).\n")
	for _, n := range names {
		f, err := fs.ReadFile(functions, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- function file %s\n-- +goose StatementBegin\n%s", path.Base(n), strings.TrimRight(string(f), "\n"))
		b.WriteString("\n-- +goose StatementEnd\n")
	}
	fmt.Fprintf(&b, "\n-- Fence functions are generated per relation from a template: regenerate them.\n%s;\n\n", refreshFences)
	for _, l := range lines[down:] {
		b.WriteString(l)
	}
	return b.String(), nil
}

// PrepareGoose runs GoosePrelude on db in one transaction under the install lock
// (InstallLockID), for Go programs that run GooseMigrations with goose's Provider.
func PrepareGoose(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("goose prelude: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1::pg_catalog.int8)", InstallLockID); err != nil {
		return fmt.Errorf("goose prelude: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, GoosePrelude); err != nil {
		return fmt.Errorf("goose prelude: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("goose prelude: %w", err)
	}
	return nil
}

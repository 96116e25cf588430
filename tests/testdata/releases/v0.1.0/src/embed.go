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
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/pressly/goose/v3"
)

//go:embed sql/migrations/*.sql
var migrationFiles embed.FS

//go:embed sql/functions/*.sql
var functionFiles embed.FS

// installLockID is the advisory lock key every installer takes, so concurrent deploys
// take turns. It is goose's default Postgres lock id, so a plain `goose up` run by hand
// against the same database also waits for us.
const installLockID = 5887940537704921958

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
// session-level advisory lock (goose's Postgres session locker): concurrent installers
// serialize instead of failing with "tuple concurrently updated".
func Install(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("install: connect: %w", err)
	}
	defer conn.Close()
	// A blocking session-level advisory lock (the key goose's Postgres session locker
	// uses): concurrent installers queue on it instead of polling once a second.
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", installLockID); err != nil {
		return fmt.Errorf("install: lock: %w", err)
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", installLockID)
	}()

	provider, err := newProvider(db)
	if err != nil {
		return err
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("install: migrate: %w", err)
	}
	return applyFunctions(ctx, conn)
}

// MigrationStatus is one migration's state, for `synchro migrate status`.
type MigrationStatus struct {
	Version int64
	Name    string
	Applied bool
}

// Status reports which migrations are applied.
func Status(ctx context.Context, db *sql.DB) ([]MigrationStatus, error) {
	provider, err := newProvider(db)
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
	return out, nil
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(),
		goose.WithTableName("synchro_goose_version"))
	if err != nil {
		return nil, fmt.Errorf("install: goose: %w", err)
	}
	return p, nil
}

// applyFunctions re-applies every function file in one transaction on the locked
// connection, so a failed file leaves the previous definitions in place.
func applyFunctions(ctx context.Context, conn *sql.Conn) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("install: functions: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
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

// SQL returns the complete install script (the Up part of every migration, then every
// function file) for teams that apply it with another migrator.
func SQL() (string, error) {
	var b strings.Builder
	b.WriteString("-- Synchro install script (generated by `synchro sql`).\nBEGIN;\n")
	names, _ := fs.Glob(Migrations(), "*.sql")
	sort.Strings(names)
	for _, n := range names {
		src, err := fs.ReadFile(Migrations(), n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n-- migration %s\n%s\n", n, gooseUp(string(src)))
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

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/synchro/synchro"
)

// runMigrations serves `synchro migrations export|prelude`: the pack for a team's own
// goose (docs/install.md).
func runMigrations(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrations")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro migrations export [--pack DIR] OUTDIR | synchro migrations prelude")
		fmt.Fprintln(fs.Output(), "export writes the pack as goose migration files (the last one re-applies every function file);")
		fmt.Fprintln(fs.Output(), "prelude prints the SQL to run once before goose (schema synchro, the version table's move).")
		fmt.Fprintf(fs.Output(), "Run goose with -table %s. See docs/install.md.\n", synchro.GooseTable)
		fs.PrintDefaults()
	}
	pack := fs.String("pack", "", "export the pack of this sql/ folder (holding migrations/ and functions/) instead of the embedded one")
	if len(args) == 0 {
		fs.Usage()
		return errors.New("migrations: want export or prelude")
	}
	sub := args[0]
	if strings.HasPrefix(sub, "-") { // `synchro migrations -h`
		if err := fs.Parse(args); err != nil {
			return err
		}
		fs.Usage()
		return errors.New("migrations: want export or prelude")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch sub {
	case "export":
		if fs.NArg() != 1 {
			fs.Usage()
			return errors.New("migrations export: want one output directory")
		}
		return exportMigrations(e, *pack, fs.Arg(0))
	case "prelude":
		if fs.NArg() != 0 || *pack != "" {
			fs.Usage()
			return errors.New("migrations prelude: takes no arguments")
		}
		_, err := fmt.Fprint(e.stdout, preludeScript())
		return err
	default:
		fs.Usage()
		return fmt.Errorf("migrations: unknown subcommand %s", shownArg(sub))
	}
}

// preludeScript is synchro.GoosePrelude in one transaction under the install lock (the
// key goose's Postgres locker and `synchro migrate up` take), for psql.
func preludeScript() string {
	return fmt.Sprintf("BEGIN;\nSELECT pg_catalog.pg_advisory_xact_lock(%d::pg_catalog.int8);\n%sCOMMIT;\n", synchro.InstallLockID, synchro.GoosePrelude)
}

// exportMigrations writes the goose source into dir. Files already there with the same
// names are replaced (a migration's version and name never change between releases, so
// re-exporting a newer release over an older one is the upgrade); other files are kept.
func exportMigrations(e *env, pack, dir string) error {
	src := synchro.GooseMigrations()
	if pack != "" {
		var err error
		src, err = synchro.GooseSource(os.DirFS(filepath.Join(pack, "migrations")), os.DirFS(filepath.Join(pack, "functions")))
		if err != nil {
			return err
		}
	}
	names, err := fs.Glob(src, "*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range names {
		b, err := fs.ReadFile(src, n)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stderr, "wrote %d goose migrations to %s; run goose with -table %s after `synchro migrations prelude` (docs/install.md)\n",
		len(names), dir, synchro.GooseTable)
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/gen"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrate")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro migrate up|status [--database-url URL]")
		fs.PrintDefaults()
	}
	dbURL := databaseURLFlag(fs)
	if len(args) == 0 {
		fs.Usage()
		return errors.New("migrate: want up or status")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "--h" {
		return fs.Parse(args[:1]) // prints the usage; flag.ErrHelp exits 0
	}
	sub := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("migrate: unexpected arguments %s", shownArgs(fs.Args()))
	}
	if err := requireURL(*dbURL); err != nil {
		return err
	}
	switch sub {
	case "up":
		return migrateUp(ctx, e, *dbURL)
	case "status":
		return migrateStatus(ctx, e, *dbURL)
	default:
		fs.Usage()
		return fmt.Errorf("migrate: unknown subcommand %s", shownArg(sub))
	}
}

func migrateUp(ctx context.Context, e *env, dbURL string) error {
	db, err := openSQL(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	e.logger.Info("installing", "database", describeDB(dbURL), "pack", synchro.Hash()[:12])
	if err := synchro.Install(ctx, db); err != nil {
		return err
	}
	e.logger.Info("installed", "database", describeDB(dbURL))
	return nil
}

func migrateStatus(ctx context.Context, e *env, dbURL string) error {
	db, err := openSQL(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	status, err := synchro.Status(ctx, db)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MIGRATION\tNAME\tSTATE")
	installed := false
	for _, s := range status {
		state := "pending"
		if s.Applied {
			state, installed = "applied", true
		}
		fmt.Fprintf(w, "%05d\t%s\t%s\n", s.Version, s.Name, state)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "pack %s\n\n", synchro.Hash()[:12])
	if !installed {
		fmt.Fprintln(e.stdout, "registry: not installed")
		return nil
	}

	conn, err := connectDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	gens, err := gen.New(conn).RegistryGenerations(ctx)
	if err != nil {
		return fmt.Errorf("registry generations: %w", err)
	}
	w = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "GENERATION\tSTATE\tACTIVATED AT")
	for _, g := range gens {
		at := "-"
		if g.ActivatedAt != nil {
			at = g.ActivatedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		fmt.Fprintf(w, "%d\t%s\t%s\n", g.Generation, g.State, at)
	}
	if len(gens) == 0 {
		fmt.Fprintln(w, "(none)\t\t")
	}
	return w.Flush()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/synchro/synchro/gen"
)

// errNotReady: `synchro ready` printed a table with a failing check (exit status 1).
var errNotReady = errors.New("not ready")

// runReady prints synchro.readiness() and succeeds only when every one of the eleven
// checks is ok (the rule of synchro.ready()).
func runReady(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "ready")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro ready [--database-url URL]")
		fmt.Fprintln(fs.Output(), "Prints synchro.readiness(); exit status 0 only when ready.")
		fs.PrintDefaults()
	}
	dbURL := databaseURLFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("ready: unexpected arguments %s", shownArgs(fs.Args()))
	}
	if err := requireURL(*dbURL); err != nil {
		return err
	}
	conn, err := connectDB(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := gen.New(conn).Readiness(ctx)
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHECK\tOK\tDETAIL")
	var failing []string
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%t\t%s\n", r.CheckName, r.Ok, r.Detail)
		if !r.Ok {
			failing = append(failing, r.CheckName)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(rows) != 11 || len(failing) > 0 {
		fmt.Fprintf(e.stdout, "not ready: %s\n", strings.Join(failing, ", "))
		return errNotReady
	}
	fmt.Fprintln(e.stdout, "ready")
	return nil
}

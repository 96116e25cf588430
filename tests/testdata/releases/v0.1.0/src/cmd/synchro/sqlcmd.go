package main

import (
	"context"
	"fmt"

	"github.com/synchro/synchro"
)

func runSQL(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "sql")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro sql > synchro.sql")
		fmt.Fprintln(fs.Output(), "Prints the install script (every migration's Up part, then every function).")
		fs.PrintDefaults()
	}
	// Accepted like every command's, but unused: the script does not depend on a database.
	_ = databaseURLFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	script, err := synchro.SQL()
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(e.stdout, script)
	return err
}

// Command synchro installs and inspects the Synchro SQL pack and runs a development
// cluster.
//
//	synchro migrate up|status [--database-url URL]
//	synchro sql
//	synchro migrations export DIR | prelude
//	synchro dev [--dir DIR] [--port N]
//	synchro run [--database-url URL] [--slot synchro] [--publication synchro] [--listen 127.0.0.1:8080]
//	synchro ready [--database-url URL]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/synchro/synchro/runner"
)

// envDatabaseURL is the fallback for --database-url.
const envDatabaseURL = "SYNCHRO_DATABASE_URL"

// command is one subcommand. run gets the arguments after the command name.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what every command shares: output streams and the logger.
type env struct {
	stdout io.Writer
	stderr io.Writer
	logger *slog.Logger
}

func commands() map[string]command {
	return map[string]command{
		"migrate":    {"install the SQL pack (up) or show what is installed (status)", runMigrate},
		"sql":        {"print the install-or-upgrade script for another migrator", runSQL},
		"migrations": {"export the pack as goose migrations (export DIR) or print goose's prelude (prelude)", runMigrations},
		"dev":        {"run a private PostgreSQL with Synchro and a demo schema", runDev},
		"run":        {"run the WAL worker (the sidecar) with /livez, /readyz and /metrics", runRun},
		"ready":      {"print synchro.readiness(); exit status 0 only when ready", runReady},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{
		stdout: os.Stdout,
		stderr: os.Stderr,
		logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	if len(os.Args) > 1 && (os.Args[1] == "run" || os.Args[1] == "dev") {
		// The runner's default GOMAXPROCS (runner.DefaultProcs says why), set here in
		// main: the commands run in-process in tests, whose GOMAXPROCS is theirs.
		procs, fromEnv := runner.ApplyProcs(os.Getenv)
		e.logger.Info("GOMAXPROCS", "procs", procs, "from_environment", fromEnv)
	}
	os.Exit(run(ctx, e, os.Args[1:]))
}

func run(ctx context.Context, e *env, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(e.stderr, "synchro: unknown command %s\n\n", shownArg(args[0]))
		usage(e.stderr, cmds)
		return 2
	}
	if err := cmd.run(ctx, e, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, errReported) {
			return 1 // logged where it happened, once
		}
		e.logger.Error("synchro "+args[0]+" failed", "err", err)
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "usage: synchro <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'synchro <command> -h' for a command's flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("synchro "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// databaseURLFlag registers --database-url, defaulting to $SYNCHRO_DATABASE_URL. Its
// value never prints: -h showed the variable's URL, password included, as the flag's
// default.
func databaseURLFlag(fs *flag.FlagSet) *string {
	p := new(string)
	*p = os.Getenv(envDatabaseURL)
	fs.Var(secretFlag{p}, "database-url", "PostgreSQL connection `URL` (default $"+envDatabaseURL+")")
	return p
}

// secretFlag is a string flag whose value flag's usage never shows.
type secretFlag struct{ p *string }

func (s secretFlag) String() string { return "" }

func (s secretFlag) Set(v string) error {
	*s.p = v
	return nil
}

func requireURL(u string) error {
	if u == "" {
		return fmt.Errorf("no database: pass --database-url or set %s", envDatabaseURL)
	}
	return nil
}

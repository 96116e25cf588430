package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner"
)

// devDatabase is the dev database; queries/dev.sql (DevDatabaseExists,
// CreateDevDatabase) names it too.
const devDatabase = "synchro_dev"

// The dev demo (tasks synced to users through project membership) and the dev
// database are queries/dev.sql.

func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dev")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro dev [--dir DIR] [--port N] [--listen ADDR] [--database-url URL]")
		fmt.Fprintln(fs.Output(), "Runs a private PostgreSQL 15 with Synchro, a demo schema and the runner until interrupted.")
		fmt.Fprintln(fs.Output(), "With --database-url, sets up that database instead and exits.")
		fs.PrintDefaults()
	}
	dir := fs.String("dir", ".synchro-dev", "cluster directory, reused if it exists")
	port := fs.Int("port", 54329, "TCP port on 127.0.0.1 (0: any free port)")
	// Flag only, not $SYNCHRO_DATABASE_URL: dev prints that export for the private
	// cluster, and a later `synchro dev` must not then skip starting it.
	existing := fs.String("database-url", "", "set up this database instead of a private cluster, then exit")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the attached runner's /livez, /readyz and /metrics")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("dev: unexpected arguments %q", fs.Args())
	}
	if *existing != "" {
		if err := migrateUp(ctx, e, *existing); err != nil {
			return err
		}
		return setupDemo(ctx, e, *existing)
	}

	cluster, err := pgcluster.Start(ctx, pgcluster.Options{
		Dir:     *dir,
		Port:    *port,
		Durable: true, // dev data outlives the process
		Logger:  e.logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := cluster.Stop(); err != nil {
			e.logger.Error("stop cluster", "err", err)
		}
	}()

	if err := createDevDatabase(ctx, cluster.URL("postgres")); err != nil {
		return err
	}
	dbURL := cluster.URL(devDatabase)
	if err := migrateUp(ctx, e, dbURL); err != nil {
		return err
	}
	if err := setupDemo(ctx, e, dbURL); err != nil {
		return err
	}

	fmt.Fprintf(e.stdout, "\nSynchro dev database ready (data in %s):\n\n  psql '%s'\n\n", cluster.Dir(), dbURL)
	fmt.Fprintf(e.stdout, "  export %s='%s'\n\n", envDatabaseURL, dbURL)
	fmt.Fprintf(e.stdout, "The runner is attached: probes and metrics on http://%s/ (livez, readyz, metrics).\nPress Ctrl-C to stop.\n", *listen)
	// The runner materializes the demo's writes until interrupted; a runner failure
	// ends dev (the cluster is stopped by the deferred Stop).
	err = serveRunner(ctx, e, runner.Config{DatabaseURL: dbURL}, *listen)
	if ctx.Err() != nil {
		e.logger.Info("stopping")
		return nil
	}
	return err
}

// createDevDatabase creates devDatabase unless it exists.
func createDevDatabase(ctx context.Context, adminURL string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", redactURL(adminURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	q := gen.New(conn)
	exists, err := q.DevDatabaseExists(ctx)
	if err != nil || exists {
		return err
	}
	return q.CreateDevDatabase(ctx)
}

// setupDemo creates the demo tables and, when this build of the pack has the registry
// functions, registers them once.
func setupDemo(ctx context.Context, e *env, dbURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", redactURL(dbURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// One transaction, like the single script it replaces: all three tables or none.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		q := gen.New(tx)
		return runAll(ctx, q.CreateDemoProjects, q.CreateDemoProjectMembers, q.CreateDemoTasks)
	})
	if err != nil {
		return fmt.Errorf("demo schema: %w", err)
	}

	st, err := gen.New(conn).DemoRegistryState(ctx)
	if err != nil {
		return fmt.Errorf("demo registry check: %w", err)
	}
	switch {
	case !st.HaveRegistry:
		e.logger.Warn("demo tables not registered: this pack has no synchro.register_table yet")
		return nil
	case st.Registered:
		return nil
	}
	// One transaction: a failed step leaves nothing staged, so the next run retries.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		q := gen.New(tx)
		return runAll(ctx, q.DemoRegisterTasks, q.DemoRegisterProjectMembers, q.DemoAddScopeRule, q.DemoActivateRegistry)
	})
	if err != nil {
		return fmt.Errorf("demo registration: %w", err)
	}
	e.logger.Info("demo tables registered", "table_id", "tasks", "scope", "user:<user_id>")
	return nil
}

// runAll runs steps in order and stops at the first error.
func runAll(ctx context.Context, steps ...func(context.Context) error) error {
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

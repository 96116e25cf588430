package main

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	dir := fs.String("dir", ".synchro-dev", "cluster directory, reused if it exists (empty or a cluster's own)")
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
		return fmt.Errorf("dev: unexpected arguments %s", shownArgs(fs.Args()))
	}
	if !hostPort(*listen) {
		return errors.New("dev: --listen: want host:port (127.0.0.1:8080; :8080 for every interface)")
	}
	if *existing != "" {
		if err := migrateUp(ctx, e, *existing); err != nil {
			return err
		}
		if err := setupDemo(ctx, e, *existing); err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, "\nDemo ready. With `synchro run` attached to this database, in psql:")
		printTryIt(e)
		return nil
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

	// The runner materializes the demo's writes until interrupted; a runner failure
	// ends dev (the cluster is stopped by the deferred Stop).
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("dev: listen: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- serveRunnerOn(ctx, e, runner.Config{DatabaseURL: dbURL}, ln) }()
	// What to type is printed once the stream has started: typed before, rebuild
	// answers SY503 (the stream has not started yet).
	started, err := waitDevStream(ctx, dbURL, served)
	if started {
		fmt.Fprintf(e.stdout, "\nSynchro dev database ready (data in %s):\n\n  psql '%s'\n\n", cluster.Dir(), dbURL)
		fmt.Fprintf(e.stdout, "  export %s='%s'\n\n", envDatabaseURL, dbURL)
		printTryIt(e)
		fmt.Fprintf(e.stdout, "The runner is attached: probes and metrics on http://%s/ (livez, readyz, metrics).\nPress Ctrl-C to stop.\n", ln.Addr())
		err = <-served
	}
	if ctx.Err() != nil {
		e.logger.Info("stopping")
		return nil
	}
	return err
}

// waitDevStream waits until the runner has started the stream (true), or returns the
// runner's result if it ends first (false).
func waitDevStream(ctx context.Context, dbURL string, served <-chan error) (bool, error) {
	conn, err := connectDB(ctx, dbURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := gen.New(conn).DevStreamStarted(ctx)
		if err == nil && ok {
			return true, nil
		}
		select {
		case err := <-served:
			return false, err
		case <-tick.C:
		}
	}
}

// createDevDatabase creates devDatabase unless it exists.
func createDevDatabase(ctx context.Context, adminURL string) error {
	conn, err := connectDB(ctx, adminURL)
	if err != nil {
		return err
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
	conn, err := connectDB(ctx, dbURL)
	if err != nil {
		return err
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
		return gen.New(conn).SeedDemo(ctx)
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
	// Seeded after activation, so the rows reach the stream (as the baseline when the
	// runner starts for the first time).
	return gen.New(conn).SeedDemo(ctx)
}

// tryIt is what `synchro dev` prints to type into psql: a new client (alice's device)
// starts with a rebuild, whose cursor psql keeps in :cursor; it pushes a task (the
// demo's key is a uuid, so "pk" is a JSON string); the pull returns the task once the
// runner has materialized it from the WAL. The ids are fixed so that the README shows
// the same lines: run again, the push answers its recorded outcome and writes nothing.
// tests: cmd/synchro/dev_test.go runs these lines through psql against a dev cluster.
var tryIt = []string{
	`SELECT synchro.rebuild('device-1', 'user:alice') ->> 'cursor' AS cursor \gset`,
	`SELECT synchro.push('device-1', '[{"id": "0f5b6c1e-2d3a-4b8c-9e7f-a1b2c3d4e5f6", "table": "tasks", "op": "insert", "pk": "8b6f1a52-3c1e-4f0a-9d2b-7e4c5a6b1c03", "row": {"project_id": 1, "title": "Try Synchro"}}]');`,
	`SELECT synchro.pull('device-1', 'user:alice', :'cursor');`,
}

func printTryIt(e *env) {
	fmt.Fprintln(e.stdout, "Try it in psql: rebuild (the new device's cursor), push a task, pull it back from the WAL:")
	fmt.Fprintln(e.stdout)
	for _, l := range tryIt {
		fmt.Fprintf(e.stdout, "  %s\n", l)
	}
	fmt.Fprintln(e.stdout, "\n(SY503 capture_pending from pull means the runner has not materialized the push yet: run it again.)")
	fmt.Fprintln(e.stdout)
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

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/internal/pgcluster"
)

const devDatabase = "synchro_dev"

// demoSchema is the dev demo: tasks synced to users through project membership.
const demoSchema = `
CREATE TABLE IF NOT EXISTS public.projects (
  id   int8 PRIMARY KEY,
  name text NOT NULL
);
CREATE TABLE IF NOT EXISTS public.project_members (
  id         int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  project_id int8 NOT NULL REFERENCES public.projects,
  user_id    text NOT NULL,
  CONSTRAINT project_members_once UNIQUE (project_id, user_id)
);
CREATE TABLE IF NOT EXISTS public.tasks (
  id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  project_id int8 NOT NULL REFERENCES public.projects,
  title      text NOT NULL,
  done       bool NOT NULL DEFAULT false
);`

// demoRegistration registers the demo: tasks reach scope user:<user_id> through
// project_members.
const demoRegistration = `
SELECT synchro.register_table('public.tasks', 'tasks');
SELECT synchro.register_dependency('public.project_members');
SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'public.project_members', 'project_id', 'user_id');
SELECT synchro.activate_registry();`

func runDev(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dev")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro dev [--dir DIR] [--port N] [--database-url URL]")
		fmt.Fprintln(fs.Output(), "Runs a private PostgreSQL 15 with Synchro and a demo schema until interrupted.")
		fmt.Fprintln(fs.Output(), "With --database-url, sets up that database instead and exits.")
		fs.PrintDefaults()
	}
	dir := fs.String("dir", ".synchro-dev", "cluster directory, reused if it exists")
	port := fs.Int("port", 54329, "TCP port on 127.0.0.1 (0: any free port)")
	// Flag only, not $SYNCHRO_DATABASE_URL: dev prints that export for the private
	// cluster, and a later `synchro dev` must not then skip starting it.
	existing := fs.String("database-url", "", "set up this database instead of a private cluster, then exit")
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

	if err := createDatabase(ctx, cluster.URL("postgres"), devDatabase); err != nil {
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
	fmt.Fprintf(e.stdout, "  export %s='%s'\n\nPress Ctrl-C to stop.\n", envDatabaseURL, dbURL)
	<-ctx.Done()
	e.logger.Info("stopping")
	return nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", redactURL(adminURL), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
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
	if _, err := conn.Exec(ctx, demoSchema); err != nil {
		return fmt.Errorf("demo schema: %w", err)
	}

	var haveRegistry, registered bool
	err = conn.QueryRow(ctx, `
		SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'register_table'
		                AND pronamespace = 'synchro'::regnamespace),
		       EXISTS (SELECT FROM synchro.relation WHERE relid = 'public.tasks'::regclass)`,
	).Scan(&haveRegistry, &registered)
	if err != nil {
		return fmt.Errorf("demo registry check: %w", err)
	}
	switch {
	case !haveRegistry:
		e.logger.Warn("demo tables not registered: this pack has no synchro.register_table yet")
		return nil
	case registered:
		return nil
	}
	// One transaction: a failed step leaves nothing staged, so the next run retries.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, demoRegistration)
		return err
	})
	if err != nil {
		return fmt.Errorf("demo registration: %w", err)
	}
	e.logger.Info("demo tables registered", "table_id", "tasks", "scope", "user:<user_id>")
	return nil
}

// Command todo is Synchro's example application: a small HTTP service that syncs each
// user's todo list to their devices, built only on the public SQL functions
// (synchro.push, synchro.pull, synchro.rebuild) and a scope authorizer. README.md says
// how to run it against `synchro dev`.
//
//	todo [--database-url URL] [--listen 127.0.0.1:8090] [--users alice:alice,bob:bob]
//	todo migrate [--database-url URL]
package main

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for goose
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, logger, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		logger.Error("todo failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, args []string) error {
	migrateOnly := len(args) > 0 && args[0] == "migrate"
	if migrateOnly {
		args = args[1:]
	}
	fs := flag.NewFlagSet("todo", flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("TODO_DATABASE_URL"),
		"the Synchro database (default $TODO_DATABASE_URL); migrate needs the role that installed Synchro")
	listen := fs.String("listen", "127.0.0.1:8090", "address of the HTTP API")
	users := fs.String("users", "alice:alice,bob:bob", "user:password pairs, comma-separated (a stand-in for real authentication)")
	noMigrate := fs.Bool("no-migrate", false, "do not apply the example's migration at start")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" {
		return errors.New("no database: pass --database-url or set TODO_DATABASE_URL")
	}
	if migrateOnly || !*noMigrate {
		if err := migrate(ctx, *dbURL); err != nil {
			return err
		}
		logger.Info("todo schema migrated")
		if migrateOnly {
			return nil
		}
	}
	userMap, err := parseUsers(*users)
	if err != nil {
		return err
	}
	pool, err := newPool(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	srv := &http.Server{
		Handler:           (&Server{DB: pool, Users: userMap, Logger: logger}).Handler(),
		ReadHeaderTimeout: 5 * time.Second,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	logger.Info("todo service listening", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// migrate applies migrations/ with goose, keeping its version table apart from
// Synchro's.
func migrate(ctx context.Context, dbURL string) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithTableName("todo_goose_version"))
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("todo migration: %w", err)
	}
	return nil
}

// newPool connects with todo_app's rights: every connection runs SET ROLE todo_app, so
// the service works with the policy of todo.todos whatever login the URL names (a
// login that is todo_app itself, or a member of it such as the superuser of
// `synchro dev`).
func newPool(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, errors.New("todo: cannot parse the database URL")
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE todo_app`)
		return err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

func parseUsers(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		user, pass, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || user == "" || pass == "" || strings.Contains(user, "/") {
			return nil, errors.New("--users: want user:password pairs, comma-separated")
		}
		out[user] = pass
	}
	return out, nil
}

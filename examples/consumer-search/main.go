// Command consumer-search feeds a full-text index table from a Synchro consumer group:
// every committed change of the synced tables, in commit order, at the indexer's own
// pace, surviving its own crashes (at-least-once; the index applies idempotently).
//
//	go run ./examples/consumer-search --database-url postgres://... [--group search] [--index-url postgres://...]
//
// The group is created at `earliest` on the first start. --database-url's role needs
// synchro_consumer; --index-url (default: the same database) is where search_documents
// lives.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/consumer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "consumer-search:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("consumer-search", flag.ContinueOnError)
	dbURL := fs.String("database-url", os.Getenv("SYNCHRO_DATABASE_URL"), "the Synchro database (role with synchro_consumer)")
	indexURL := fs.String("index-url", "", "the database of the index table (default: --database-url)")
	group := fs.String("group", "search", "the consumer group")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" {
		return errors.New("--database-url (or SYNCHRO_DATABASE_URL) is required")
	}
	if *indexURL == "" {
		*indexURL = *dbURL
	}
	src, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := pgxpool.New(ctx, *indexURL)
	if err != nil {
		return err
	}
	defer dst.Close()
	return Serve(ctx, src, dst, *group, slog.Default())
}

// Serve creates the group (first start) and the index table, then indexes until ctx ends.
func Serve(ctx context.Context, src, dst *pgxpool.Pool, group string, log *slog.Logger) error {
	if err := ensureGroup(ctx, src, group); err != nil {
		return err
	}
	ix := Index{DB: dst}
	if err := ix.Setup(ctx); err != nil {
		return fmt.Errorf("index table: %w", err)
	}
	log.Info("consumer-search: indexing", "group", group)
	return consumer.Run(ctx, consumer.Config{DB: src, Group: group, Logger: log}, ix.Apply)
}

// ensureGroup creates the group at earliest unless it exists (a removed group's name
// cannot be used again: that is an error).
func ensureGroup(ctx context.Context, db *pgxpool.Pool, group string) error {
	var exists, removed bool
	err := db.QueryRow(ctx, `SELECT true, removed_at IS NOT NULL FROM synchro.consumer_groups WHERE name = $1`, group).
		Scan(&exists, &removed)
	switch {
	case err == nil && removed:
		return fmt.Errorf("consumer group %s was removed; choose another name", group)
	case err == nil:
		return nil
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	if _, err = db.Exec(ctx, `SELECT synchro.create_consumer_group($1, 'earliest')`, group); err != nil {
		// Another indexer created it first.
		var again bool
		if db.QueryRow(ctx, `SELECT removed_at IS NULL FROM synchro.consumer_groups WHERE name = $1`, group).Scan(&again) == nil && again {
			return nil
		}
		return err
	}
	return nil
}

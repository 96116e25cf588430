package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// errBadURL never echoes the connection string: it may hold a password, in forms no
// pattern finds reliably (pgx's own parse error quoted `password = x`, a
// backslash-escaped password, sslpassword in a URL).
var errBadURL = errors.New("cannot parse the database URL (not shown: it may hold a password)")

// connectTimeout bounds a connection attempt whose URL sets no connect_timeout, as the
// runner's does: a server that accepts the connection and never answers made ready
// and migrate wait for ever.
const connectTimeout = 10 * time.Second

// parseDB parses a connection string (URL or keyword/value form) with pgx.
func parseDB(raw string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil || misparsed(raw) {
		return nil, errBadURL
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	// The commands' statements (install, status, ready) resolve unqualified names in
	// pg_catalog whatever search_path the database or role sets: they run as a
	// deploy or operator role, and an application that owns the database must not
	// slip its own overload in front of pg_catalog's.
	cfg.RuntimeParams["search_path"] = "pg_catalog, pg_temp"
	return cfg, nil
}

// describeDB names the database of a connection string for logs and errors: its host,
// port, database and user, as parsed, and nothing else of the text (an allow-list: a
// password, sslpassword or any other parameter never shows).
func describeDB(raw string) string {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil || misparsed(raw) {
		return "(unparsable connection string)"
	}
	return fmt.Sprintf("host=%s port=%d database=%s user=%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

// connectDB opens one connection.
func connectDB(ctx context.Context, raw string) (*pgx.Conn, error) {
	cfg, err := parseDB(raw)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", describeDB(raw), err)
	}
	return conn, nil
}

// openSQL opens database/sql over pgx and checks the connection.
func openSQL(ctx context.Context, raw string) (*sql.DB, error) {
	cfg, err := parseDB(raw)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDB(*cfg)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect %s: %w", describeDB(raw), err)
	}
	return db, nil
}

// misparsed: a URL whose password holds an unescaped "/" still parses, as a host, a
// port and a database made of the password's rest ("postgres://app:2024/pw@host/db":
// host app, port 2024, database "pw@host/db"), and describeDB would print that rest.
// A URL whose path (the database name as written) holds an unescaped "@" is such a URL:
// refused as unparsable, without its text
// (TestDeployEdgeUnescapedSlashInPasswordNotLogged). A user name with an "@" (Azure's
// user@server) is written escaped in the user part and stays valid, as does a database
// name whose "@" is escaped (%40).
func misparsed(raw string) bool {
	lower := strings.ToLower(raw)
	if !strings.HasPrefix(lower, "postgres://") && !strings.HasPrefix(lower, "postgresql://") {
		return false
	}
	u, err := url.Parse(raw)
	return err == nil && strings.Contains(u.EscapedPath(), "@")
}

// shownArgs quotes command-line arguments for an error, each one only when it cannot be
// a connection string: a URL typed where a command takes none (without
// --database-url) was echoed whole, password included.
func shownArgs(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shownArg(a)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// shownArg quotes a command or argument for an error, or names it as not shown when
// it could hold a connection string or a password (a "://", an "=", an "@") or is
// longer than any command name.
func shownArg(a string) string {
	if len(a) > 40 || strings.ContainsAny(a, "=@:/ ") {
		return "(an argument not shown: it may hold a connection string)"
	}
	return strconv.Quote(a)
}

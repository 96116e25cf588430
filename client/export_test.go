package client

import (
	"context"
	"database/sql"
	"time"
)

// OpenWithRPC opens a Client whose server calls go to rpc instead of a pool: rpc
// gets the function name ("rebuild", "pull", "push") and its arguments and returns
// the jsonb result as text.
func OpenWithRPC(ctx context.Context, cfg Config, rpc func(ctx context.Context, fn string, args ...any) ([]byte, error)) (*Client, error) {
	return open(ctx, cfg, rpc)
}

// SetSleep replaces the backoff sleep.
func SetSleep(c *Client, sleep func(ctx context.Context, d time.Duration) error) { c.sleep = sleep }

// Store is the local SQLite store.
func Store(c *Client) *sql.DB { return c.store }

package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/gen"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// Config configures a Client. Zero values take their defaults.
type Config struct {
	// DB is the connection pool to the Synchro database. Its role needs
	// synchro_app. Required unless the client is built for tests.
	DB *pgxpool.Pool
	// StorePath is the SQLite file of the local replica. ":memory:" keeps the
	// replica in memory for the life of the Client.
	StorePath string
	// ClientID identifies this client to the server (1 to 256 characters): push
	// outcomes and capture_pending are per client id.
	ClientID string
	// Logger gets structured logs without row values, key values or scope strings
	// (scopes appear as hashes; default slog.Default()).
	Logger *slog.Logger
	// PageSize is max_changes of each pull page (default 1000, 1 to 10000).
	PageSize int
	// RebuildPageSize is max_rows of each rebuild page (default 1000, 1 to 10000).
	RebuildPageSize int
	// Backoff paces the retries of SY503 capture_pending.
	Backoff Backoff
	// MaxRebuilds bounds the consecutive rebuilds of one Sync (default 3).
	MaxRebuilds int

	// Hooks are test seams. Never set them in an application.
	Hooks Hooks
}

// Backoff is an exponential backoff: Initial, doubling up to Max, for at most
// MaxAttempts attempts in all (the first attempt included).
type Backoff struct {
	Initial     time.Duration // default 50ms
	Max         time.Duration // default 5s
	MaxAttempts int           // default 10
}

// Hooks are test-only seams.
type Hooks struct {
	// TamperRebuildRow, when set, may change each rebuild row as it arrives,
	// before it is staged: it simulates corruption in transit for the checksum
	// test. TEST ONLY.
	TamperRebuildRow func(*Row)
	// ApplyChange, when set, runs inside the local apply transaction before the
	// seq-th staged change (0-based) of scope is applied; an error aborts the whole
	// apply, as a crash or a disk error would. TEST ONLY.
	ApplyChange func(scope string, seq int64) error
}

// Row is one row of the local replica.
type Row struct {
	Table   string          // table_id
	PK      string          // canonical key text (decimal for int keys)
	Version string          // opaque row version
	Data    json.RawMessage // row image as the server rendered it
}

// rpcFunc calls synchro.<fn>(args...) and returns its jsonb result as text.
type rpcFunc func(ctx context.Context, fn string, args ...any) ([]byte, error)

// Client is a local replica of some scopes plus the calls that keep it in sync.
// Its methods are safe for concurrent use; Syncs of one scope are serialized.
type Client struct {
	cfg   Config
	log   *slog.Logger
	store *sql.DB
	rpc   rpcFunc

	mu     sync.Mutex
	scopes map[string]chan struct{}
	sleep  func(ctx context.Context, d time.Duration) error
}

// schema is the store layout storeLayout (sync.go): each scope's image of a row is
// kept on its hold, never shared between scopes (see the package documentation).
const schema = `
CREATE TABLE IF NOT EXISTS holds (
  scope    TEXT NOT NULL,
  table_id TEXT NOT NULL,
  pk       TEXT NOT NULL,
  version  TEXT NOT NULL,
  row      TEXT NOT NULL,
  PRIMARY KEY (scope, table_id, pk)
);
CREATE INDEX IF NOT EXISTS holds_row ON holds (table_id, pk);
CREATE TABLE IF NOT EXISTS scopes (
  scope  TEXT PRIMARY KEY,
  cursor TEXT,
  synced INTEGER
);
CREATE TABLE IF NOT EXISTS staging (
  scope  TEXT NOT NULL,
  seq    INTEGER NOT NULL,
  change TEXT NOT NULL,
  PRIMARY KEY (scope, seq)
);`

// Open opens (or creates) the local store and returns a Client.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.DB == nil {
		return nil, errors.New("synchro client: Config.DB is required")
	}
	return open(ctx, cfg, serverRPC(gen.New(cfg.DB)))
}

// serverRPC calls the server functions through the generated queries
// (queries/client.sql). The arguments are those of the rpc calls in push.go and
// sync.go.
func serverRPC(q *gen.Queries) rpcFunc {
	return func(ctx context.Context, fn string, args ...any) ([]byte, error) {
		var (
			res string
			err error
		)
		switch fn {
		case "push":
			var p gen.PushParams
			if err := bindArgs(fn, args, &p.ClientID, &p.Mutations); err != nil {
				return nil, err
			}
			res, err = q.Push(ctx, p)
		case "pull":
			var p gen.PullParams
			var max int
			if err := bindArgs(fn, args, &p.ClientID, &p.Scope, &p.Cursor, &max); err != nil {
				return nil, err
			}
			p.MaxChanges = int32(max) // 1 to 10000, checked by open
			res, err = q.Pull(ctx, p)
		case "rebuild":
			var p gen.RebuildParams
			var max int
			if err := bindArgs(fn, args, &p.ClientID, &p.Scope, &p.Session, &max); err != nil {
				return nil, err
			}
			p.MaxRows = int32(max) // 1 to 10000, checked by open
			res, err = q.Rebuild(ctx, p)
		default:
			return nil, fmt.Errorf("synchro client: unknown server call %q", fn)
		}
		if err != nil {
			return nil, err
		}
		return []byte(res), nil
	}
}

// bindArgs assigns args to dsts (pointers of the same types, in order).
func bindArgs(fn string, args []any, dsts ...any) error {
	if len(args) != len(dsts) {
		return fmt.Errorf("synchro client: %s: %d arguments, want %d", fn, len(args), len(dsts))
	}
	for i, a := range args {
		ok := false
		switch d := dsts[i].(type) {
		case *string:
			*d, ok = a.(string)
		case **string:
			*d, ok = a.(*string)
		case *int:
			*d, ok = a.(int)
		}
		if !ok {
			return fmt.Errorf("synchro client: %s: argument %d is %T", fn, i+1, a)
		}
	}
	return nil
}

func open(ctx context.Context, cfg Config, rpc rpcFunc) (*Client, error) {
	// Characters, as the server counts them (length(client_id)), not bytes.
	if l := utf8.RuneCountInString(cfg.ClientID); l < 1 || l > 256 || !utf8.ValidString(cfg.ClientID) {
		return nil, errors.New("synchro client: ClientID must be 1 to 256 characters")
	}
	if cfg.StorePath == "" {
		return nil, errors.New("synchro client: Config.StorePath is required (\":memory:\" for a temporary store)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PageSize == 0 {
		cfg.PageSize = 1000
	}
	if cfg.RebuildPageSize == 0 {
		cfg.RebuildPageSize = 1000
	}
	if cfg.PageSize < 1 || cfg.PageSize > 10000 || cfg.RebuildPageSize < 1 || cfg.RebuildPageSize > 10000 {
		return nil, errors.New("synchro client: PageSize and RebuildPageSize must be 1 to 10000")
	}
	if cfg.Backoff.Initial <= 0 {
		cfg.Backoff.Initial = 50 * time.Millisecond
	}
	if cfg.Backoff.Max <= 0 {
		cfg.Backoff.Max = 5 * time.Second
	}
	if cfg.Backoff.Max < cfg.Backoff.Initial {
		cfg.Backoff.Max = cfg.Backoff.Initial
	}
	if cfg.Backoff.MaxAttempts <= 0 {
		cfg.Backoff.MaxAttempts = 10
	}
	if cfg.MaxRebuilds <= 0 {
		cfg.MaxRebuilds = 3
	}

	store, err := sql.Open("sqlite", storeDSN(cfg.StorePath))
	if err != nil {
		return nil, fmt.Errorf("synchro client: open store: %w", err)
	}
	// One connection: an in-memory store lives in it, and every local write is a
	// short transaction anyway. It is never recycled.
	store.SetMaxOpenConns(1)
	store.SetMaxIdleConns(1)
	store.SetConnMaxLifetime(0)
	store.SetConnMaxIdleTime(0)
	if err := initStore(ctx, store); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("synchro client: create store schema: %w", err)
	}
	return &Client{
		cfg:    cfg,
		log:    cfg.Logger.With("client_id", cfg.ClientID),
		store:  store,
		rpc:    rpc,
		scopes: map[string]chan struct{}{},
		sleep:  sleepCtx,
	}, nil
}

func storeDSN(path string) string {
	if path == ":memory:" {
		return ":memory:"
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	// The path is a plain file path: escaped, so that '?', '#' or '%' in it name that
	// file instead of starting the URI's query or fragment (two paths that differed
	// after a '#' opened one file, and after a '?' the pragmas were lost).
	// A path that starts with "//" names the same file as with one '/', but "file://x"
	// would read x as the URI's authority (a host), and Open failed.
	for strings.HasPrefix(path, "//") {
		path = path[1:]
	}
	u := url.URL{Scheme: "file", Opaque: (&url.URL{Path: path}).EscapedPath(), RawQuery: q.Encode()}
	return u.String()
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Close closes the local store. The server pool belongs to the caller.
func (c *Client) Close() error { return c.store.Close() }

// Subscribe registers scope with no cursor yet: its first Sync rebuilds it.
// Subscribing to a scope already registered changes nothing.
func (c *Client) Subscribe(ctx context.Context, scope string) error {
	if scope == "" {
		return errors.New("synchro client: empty scope")
	}
	_, err := c.store.ExecContext(ctx, `INSERT INTO scopes (scope, cursor) VALUES (?, NULL) ON CONFLICT (scope) DO NOTHING`, scope)
	return err
}

// Cursor returns the scope's saved cursor (the token a client holds, opaque) and
// whether it has one.
func (c *Client) Cursor(ctx context.Context, scope string) (string, bool, error) {
	var cur sql.NullString
	err := c.store.QueryRowContext(ctx, `SELECT cursor FROM scopes WHERE scope = ?`, scope).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, fmt.Errorf("%w: scope %s", ErrNotSubscribed, scopeRef(scope))
	}
	if err != nil {
		return "", false, err
	}
	return cur.String, cur.Valid, nil
}

// Rows returns the scope's replica: the rows it holds with the scope's own images,
// ordered by table and key text.
func (c *Client) Rows(ctx context.Context, scope string) ([]Row, error) {
	rs, err := c.store.QueryContext(ctx, `
SELECT table_id, pk, version, row FROM holds WHERE scope = ? ORDER BY table_id, pk`, scope)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []Row
	for rs.Next() {
		var r Row
		var data string
		if err := rs.Scan(&r.Table, &r.PK, &r.Version, &data); err != nil {
			return nil, err
		}
		r.Data = json.RawMessage(data)
		out = append(out, r)
	}
	return out, rs.Err()
}

// Row returns one row of the local replica, whatever scope holds it, and false when
// no scope does. pk is a string, an integer, or a json.Number/json.RawMessage key as
// the server sends it. Each scope keeps its own image of a row; when several scopes
// hold it, Row returns the image of the scope whose Sync completed last (ties, which
// only a store upgraded from layout 0 has, go to the first scope by name). Of two
// Syncs that do not overlap, the later one saw the later server state, so that is
// the newest image the client has; versions are never compared. Use Rows for one
// scope's consistent view.
func (c *Client) Row(ctx context.Context, table string, pk any) (Row, bool, error) {
	key, err := KeyText(pk)
	if err != nil {
		return Row{}, false, err
	}
	r := Row{Table: table, PK: key}
	var data string
	err = c.store.QueryRowContext(ctx, `
SELECT h.version, h.row FROM holds h LEFT JOIN scopes s ON s.scope = h.scope
 WHERE h.table_id = ? AND h.pk = ?
 ORDER BY s.synced IS NULL, s.synced DESC, h.scope LIMIT 1`, table, key).Scan(&r.Version, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, err
	}
	r.Data = json.RawMessage(data)
	return r, true, nil
}

// scopeLock serializes the Syncs of one scope: a one-slot semaphore, so that a Sync
// waiting for another one of its scope still honours its context.
func (c *Client) scopeLock(scope string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.scopes[scope]
	if !ok {
		m = make(chan struct{}, 1)
		c.scopes[scope] = m
	}
	return m
}

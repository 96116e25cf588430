package client

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Wire shapes of CONTRACT.md "Pull" and "Rebuild".
type (
	rebuildPage struct {
		Session  string       `json:"session"`
		Rows     []wireChange `json:"rows"`
		HasMore  bool         `json:"has_more"`
		Checksum *string      `json:"checksum"`
		Cursor   *string      `json:"cursor"`
	}
	pullPage struct {
		Changes []wireChange `json:"changes"`
		Cursor  string       `json:"cursor"`
		HasMore bool         `json:"has_more"`
	}
	wireChange struct {
		Table   string          `json:"table"`
		PK      json.RawMessage `json:"pk"`
		Op      string          `json:"op"` // pull only; rebuild rows are upserts
		Version string          `json:"version"`
		Row     json.RawMessage `json:"row"`
	}
)

// stagedChange is one row of staging.change: a change with its canonical key.
type stagedChange struct {
	Table   string `json:"table"`
	PK      string `json:"pk"`
	Op      string `json:"op"` // "upsert" or "delete"
	Version string `json:"version,omitempty"`
	// Row is the row image's JSON text exactly as the server sent it, staged as a JSON
	// string so that its bytes come back unchanged (a json.RawMessage was compacted
	// and HTML-escaped by json.Marshal: the replica held other bytes than the server
	// rendered).
	Row string `json:"row_text,omitempty"`
}

// Sync brings scope up to date: a rebuild when it has no cursor, then pulls until
// the end of the stream (see the package documentation). The scope must have been
// subscribed.
func (c *Client) Sync(ctx context.Context, scope string) error {
	l := c.scopeLock(scope)
	select {
	case l <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-l }()

	if _, _, err := c.Cursor(ctx, scope); err != nil {
		return err
	}
	// Pages staged by a transfer that did not finish (crash, error) are discarded:
	// they are fetched again from the saved cursor.
	if err := c.clearStaging(ctx, scope); err != nil {
		return err
	}
	rebuilds := 0
	var last409 error
	for {
		cursor, ok, err := c.Cursor(ctx, scope)
		if err != nil {
			return err
		}
		if !ok {
			if rebuilds == c.cfg.MaxRebuilds {
				return fmt.Errorf("%w (%d) of scope %s: %w", ErrRebuildLoop, rebuilds, scopeRef(scope), last409)
			}
			rebuilds++
			err := c.rebuild(ctx, scope)
			if errors.Is(err, errMovedOn) {
				// Another Client of this store applied a rebuild or pull first. Not
				// necessarily a newer one: pull again from the cursor it saved, so
				// this Sync ends no older than its own start (a push this Client saw
				// accepted before it is in).
				c.log.Info("synchro client: another Sync of this store moved the scope first; pulling from its cursor", "scope", scopeRef(scope))
				continue
			}
			if sqlState(err) == codeRebuildRequired {
				c.log.Warn("synchro client: rebuild session stale, rebuilding again", "scope", scopeRef(scope), "rebuilds", rebuilds)
				last409 = err
				continue
			}
			// A rebuild ends with its pull to the end of the stream: up to date.
			return err
		}
		err = c.pull(ctx, scope, cursor)
		if errors.Is(err, errMovedOn) {
			// As above: the other Client's transfer may be older than this one's
			// (TestClientTwoInstancesMovedOnKeepsReadYourWrites); the loop pulls from
			// the cursor it saved.
			c.log.Info("synchro client: another Sync of this store moved the scope first; pulling from its cursor", "scope", scopeRef(scope))
			continue
		}
		if sqlState(err) == codeRebuildRequired {
			c.log.Info("synchro client: rebuild required", "scope", scopeRef(scope))
			last409 = err
			// Drop the cursor durably: a crash from here on resumes with a rebuild.
			// Rows and holds stay readable until the rebuild replaces them. Only the
			// cursor that was refused: another Client of this store may have saved a
			// newer one meanwhile.
			if _, err := c.store.ExecContext(ctx, `UPDATE scopes SET cursor = NULL WHERE scope = ? AND cursor IS ?`, scope, cursor); err != nil {
				return err
			}
			continue
		}
		return err
	}
}

// call runs one server call, retrying SY503 with exponential backoff.
func (c *Client) call(ctx context.Context, out any, fn string, args ...any) error {
	delay := c.cfg.Backoff.Initial
	for attempt := 1; ; attempt++ {
		raw, err := c.rpc(ctx, fn, args...)
		if err == nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("synchro client: decode %s result: %w", fn, err)
			}
			return nil
		}
		if sqlState(err) != codeCapturePending || attempt >= c.cfg.Backoff.MaxAttempts {
			return classify(err)
		}
		c.log.Debug("synchro client: capture pending, retrying", "call", fn, "attempt", attempt, "delay", delay)
		if err := c.sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, c.cfg.Backoff.Max)
	}
}

// rebuild fetches and stages every page of a rebuild session, then verifies the
// checksum and applies the whole set in one local transaction.
func (c *Client) rebuild(ctx context.Context, scope string) (err error) {
	tr := newTransfer(scope, nil)
	defer func() {
		if err != nil {
			c.dropTransfer(ctx, tr) // whatever it staged (applyRebuild dropped it already)
		}
	}()
	start := time.Now()
	var session *string
	for pages := 1; ; pages++ {
		var page rebuildPage
		if err := c.call(ctx, &page, "rebuild", c.cfg.ClientID, scope, session, c.cfg.RebuildPageSize); err != nil {
			return err
		}
		staged := make([]stagedChange, 0, len(page.Rows))
		for _, w := range page.Rows {
			key, err := rawKeyText(w.PK)
			if err != nil {
				return err
			}
			r := Row{Table: w.Table, PK: key, Version: w.Version, Data: w.Row}
			if c.cfg.Hooks.TamperRebuildRow != nil {
				c.cfg.Hooks.TamperRebuildRow(&r)
			}
			staged = append(staged, stagedChange{Table: r.Table, PK: r.PK, Op: "upsert", Version: r.Version, Row: string(r.Data)})
		}
		if err := c.stage(ctx, tr, staged); err != nil {
			return err
		}
		if page.HasMore {
			s := page.Session
			session = &s
			continue
		}
		if page.Checksum == nil || page.Cursor == nil {
			return errors.New("synchro client: the last rebuild page has no checksum or cursor")
		}
		// The rows are the scope at the rebuild's position P, except that a row changed
		// after P may come in its newer state (CONTRACT.md "Rebuild"): only with the
		// pull from P applied is the set a state the scope had. So the catch-up pull is
		// staged behind the rows and both are applied in one local transaction; saved
		// alone, the rows were a replica no reader should see (half of a transaction).
		rowsEnd := tr.next
		// The checksum first: a mismatch is known before anything more is fetched.
		if err := c.checkStaged(ctx, tr, rowsEnd, *page.Checksum); err != nil {
			return err
		}
		cursor, err := c.stagePull(ctx, tr, *page.Cursor)
		if err != nil {
			return err
		}
		if err := c.applyRebuild(ctx, tr, rowsEnd, cursor, *page.Checksum); err != nil {
			return err // errMovedOn: Sync pulls from the cursor the other Client saved
		}
		c.log.Info("synchro client: scope rebuilt", "scope", scopeRef(scope), "rows", rowsEnd-tr.base, "pages", pages,
			"caught_up", tr.next-rowsEnd, "took", time.Since(start))
		return nil
	}
}

// pull stages pull pages while has_more is true and applies them all, with the
// closing page's cursor, in one local transaction.
func (c *Client) pull(ctx context.Context, scope, cursor string) error {
	tr := newTransfer(scope, &cursor)
	next, err := c.stagePull(ctx, tr, cursor)
	if err != nil {
		c.dropTransfer(ctx, tr)
		return err
	}
	if err := c.applyPull(ctx, tr, next); err != nil {
		return err // errMovedOn: Sync pulls again from the cursor the other Client saved
	}
	if n := tr.next - tr.base; n > 0 {
		c.log.Debug("synchro client: pulled", "scope", scopeRef(scope), "changes", n)
	}
	return nil
}

// transfer is the pages one rebuild or pull stages before it applies them. Its rows
// of staging are numbered from a random base, so that another Client open on the same
// store file (nothing prevents two) stages its own range and never has its pages taken
// for this one's, and it applies only if the scope's cursor is still the one it
// started from (closeTransfer): a Client on the same store that applied first wins,
// and this transfer's pages, older or not, are dropped. Before, a second Client's Sync
// deleted the first one's staged pages and the first applied the rest and saved its
// cursor past the changes it lost (TestClientEdge2TwoInstancesOneStoreSkipChanges).
type transfer struct {
	scope      string
	base, next int64   // its staged rows are [base, next)
	from       *string // the scope's cursor when it started (nil: none, a rebuild)
}

func newTransfer(scope string, from *string) *transfer {
	base := rand.Int64N(1<<30) << 32 // 2^32 staged changes per transfer
	return &transfer{scope: scope, base: base, next: base, from: from}
}

// errMovedOn: the scope's cursor moved since the transfer started (another Client
// on the same store applied first).
var errMovedOn = errors.New("synchro client: the scope's cursor moved since this transfer started")

// errStagingLost: rows the transfer staged are gone (another Client on the same store
// cleared them): nothing is applied, and the next Sync fetches them again.
var errStagingLost = errors.New("synchro client: staged pages were removed by another Sync of the same store; nothing applied")

// stagePull stages pull pages from cursor, numbered from seq, while has_more is true,
// and returns the closing page's cursor and the next sequence number.
func (c *Client) stagePull(ctx context.Context, tr *transfer, cursor string) (string, error) {
	for {
		var page pullPage
		if err := c.call(ctx, &page, "pull", c.cfg.ClientID, tr.scope, cursor, c.cfg.PageSize); err != nil {
			return "", err
		}
		staged := make([]stagedChange, 0, len(page.Changes))
		for _, w := range page.Changes {
			key, err := rawKeyText(w.PK)
			if err != nil {
				return "", err
			}
			switch w.Op {
			case "upsert":
				staged = append(staged, stagedChange{Table: w.Table, PK: key, Op: "upsert", Version: w.Version, Row: string(w.Row)})
			case "delete":
				staged = append(staged, stagedChange{Table: w.Table, PK: key, Op: "delete"})
			default:
				return "", fmt.Errorf("synchro client: pull change with op %q", w.Op)
			}
		}
		if err := c.stage(ctx, tr, staged); err != nil {
			return "", err
		}
		// The page cursor is kept in memory only: it is never saved before the pages
		// it covers are applied.
		cursor = page.Cursor
		if !page.HasMore {
			return cursor, nil
		}
	}
}

// clearStaging drops the scope's staged pages.
func (c *Client) clearStaging(ctx context.Context, scope string) error {
	_, err := c.store.ExecContext(ctx, `DELETE FROM staging WHERE scope = ?`, scope)
	return err
}

// dropTransfer drops the transfer's staged pages, and only its own; a failure is
// logged (the next Sync clears them).
func (c *Client) dropTransfer(ctx context.Context, tr *transfer) {
	_, err := c.store.ExecContext(context.WithoutCancel(ctx), `DELETE FROM staging WHERE scope = ? AND seq >= ? AND seq < ?`,
		tr.scope, tr.base, tr.next)
	if err != nil {
		c.log.Warn("synchro client: clear staging", "scope", scopeRef(tr.scope), "err", err)
	}
}

// stage writes one page to staging, numbered from the transfer's next sequence
// number, in one local transaction.
func (c *Client) stage(ctx context.Context, tr *transfer, changes []stagedChange) error {
	if len(changes) == 0 {
		return nil
	}
	scope, seq := tr.scope, tr.next
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO staging (scope, seq, change) VALUES (?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, ch := range changes {
			b, err := json.Marshal(ch)
			if err != nil {
				return err
			}
			if _, err := st.ExecContext(ctx, scope, seq+int64(i), string(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		tr.next = seq + int64(len(changes))
	}
	return err
}

// checkStaged compares the checksum of the rebuild rows staged for scope (all that is
// staged) with the server's; on a mismatch it discards them and returns
// ErrChecksumMismatch. applyRebuild checks again over exactly what it applies.
func (c *Client) checkStaged(ctx context.Context, tr *transfer, rowsEnd int64, checksum string) error {
	scope := tr.scope
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		items, err := readStaged(ctx, tx, scope, tr.base, rowsEnd)
		if err != nil {
			return err
		}
		h := newChain()
		for _, it := range items {
			h.add(it.ch.Table, it.ch.PK, it.ch.Version)
		}
		if got := h.hex(); got != checksum {
			return fmt.Errorf("%w: scope %s: server %s, received %s", ErrChecksumMismatch, scopeRef(scope), checksum, got)
		}
		return nil
	})
	if err != nil {
		c.dropTransfer(ctx, tr)
	}
	if errors.Is(err, ErrChecksumMismatch) {
		c.log.Error("synchro client: rebuild checksum mismatch, nothing applied", "scope", scopeRef(scope))
	}
	return err
}

// applyRebuild: in one local transaction, checks the checksum over the staged rows
// (the first rows staged changes), replaces the scope's images with them, applies the
// catch-up pull's changes staged after them, saves the cursor and clears staging. A
// checksum mismatch rolls back (nothing applied) and discards everything staged. Other
// scopes' images are not touched, whatever rows they share with this one.
func (c *Client) applyRebuild(ctx context.Context, tr *transfer, rowsEnd int64, cursor, checksum string) error {
	scope := tr.scope
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM holds WHERE scope = ?`, scope); err != nil {
			return err
		}
		h := newChain()
		err := c.eachStaged(ctx, tx, tr, func(seq int64, ch stagedChange) error {
			if seq < rowsEnd {
				h.add(ch.Table, ch.PK, ch.Version)
				return upsert(ctx, tx, scope, ch)
			}
			if ch.Op == "delete" {
				return release(ctx, tx, scope, ch.Table, ch.PK)
			}
			return upsert(ctx, tx, scope, ch)
		})
		if err != nil {
			return err
		}
		if got := h.hex(); got != checksum {
			return fmt.Errorf("%w: scope %s: server %s, received %s", ErrChecksumMismatch, scopeRef(scope), checksum, got)
		}
		return c.closeTransfer(ctx, tx, tr, cursor)
	})
	if err != nil {
		// Whatever failed, the staged rows are not trusted again.
		c.dropTransfer(ctx, tr)
		if errors.Is(err, ErrChecksumMismatch) {
			c.log.Error("synchro client: rebuild checksum mismatch, nothing applied", "scope", scopeRef(scope))
		}
	}
	return err
}

// applyPull applies every staged change of scope in order and saves cursor, in one
// local transaction.
func (c *Client) applyPull(ctx context.Context, tr *transfer, cursor string) error {
	scope := tr.scope
	err := c.inTx(ctx, func(tx *sql.Tx) error {
		err := c.eachStaged(ctx, tx, tr, func(_ int64, ch stagedChange) error {
			if ch.Op == "delete" {
				return release(ctx, tx, scope, ch.Table, ch.PK)
			}
			return upsert(ctx, tx, scope, ch)
		})
		if err != nil {
			return err
		}
		return c.closeTransfer(ctx, tx, tr, cursor)
	})
	if err != nil {
		c.dropTransfer(ctx, tr)
	}
	return err
}

// stagedItem is one staged change with its sequence number.
type stagedItem struct {
	seq int64
	ch  stagedChange
}

// readStaged reads the staged changes of scope numbered [from, to) in seq order, and
// fails with errStagingLost unless every one of them is there. The whole set is read
// first: one connection cannot interleave a cursor and writes portably.
func readStaged(ctx context.Context, tx *sql.Tx, scope string, from, to int64) ([]stagedItem, error) {
	rs, err := tx.QueryContext(ctx, `SELECT seq, change FROM staging WHERE scope = ? AND seq >= ? AND seq < ? ORDER BY seq`,
		scope, from, to)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var items []stagedItem
	for rs.Next() {
		var it stagedItem
		var raw string
		if err := rs.Scan(&it.seq, &raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(raw), &it.ch); err != nil {
			return nil, fmt.Errorf("synchro client: staged change %d: %w", it.seq, err)
		}
		items = append(items, it)
	}
	if err := rs.Close(); err != nil {
		return nil, err
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	if int64(len(items)) != to-from {
		return nil, fmt.Errorf("%w (scope %s: %d of %d)", errStagingLost, scopeRef(scope), len(items), to-from)
	}
	return items, nil
}

// eachStaged calls fn for every staged change of scope in seq order (after the
// ApplyChange hook, if any).
func (c *Client) eachStaged(ctx context.Context, tx *sql.Tx, tr *transfer, fn func(int64, stagedChange) error) error {
	items, err := readStaged(ctx, tx, tr.scope, tr.base, tr.next)
	if err != nil {
		return err
	}
	for _, it := range items {
		if hook := c.cfg.Hooks.ApplyChange; hook != nil {
			if err := hook(tr.scope, it.seq-tr.base); err != nil {
				return err
			}
		}
		if err := fn(it.seq, it.ch); err != nil {
			return err
		}
	}
	return nil
}

// closeTransfer saves the cursor, stamps the scope with the next local sync number
// (the order in which scopes were brought up to date, used by Row) and clears
// staging, inside the apply transaction.
//
// The cursor is saved only if it is still the one the transfer started from
// (errMovedOn otherwise: the caller's transaction rolls back).
func (c *Client) closeTransfer(ctx context.Context, tx *sql.Tx, tr *transfer, cursor string) error {
	res, err := tx.ExecContext(ctx, `
UPDATE scopes SET cursor = ?, synced = (SELECT coalesce(max(synced), 0) + 1 FROM scopes)
 WHERE scope = ? AND cursor IS ?`, cursor, tr.scope, tr.from)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n != 1 {
		var one int
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM scopes WHERE scope = ?`, tr.scope).Scan(&one); errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: scope %s", ErrNotSubscribed, scopeRef(tr.scope))
		} else if err != nil {
			return err
		}
		return errMovedOn
	}
	_, err = tx.ExecContext(ctx, `DELETE FROM staging WHERE scope = ? AND seq >= ? AND seq < ?`, tr.scope, tr.base, tr.next)
	return err
}

// upsert writes the scope's image of the row (version and row on its hold). The
// images other scopes hold of the same row are not touched: their streams are at
// their own positions, and versions are never compared.
func upsert(ctx context.Context, tx *sql.Tx, scope string, ch stagedChange) error {
	row := ch.Row
	if row == "" {
		row = "null"
	}
	_, err := tx.ExecContext(ctx, `
INSERT INTO holds (scope, table_id, pk, version, row) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (scope, table_id, pk) DO UPDATE SET version = excluded.version, row = excluded.row`,
		scope, ch.Table, ch.PK, ch.Version, row)
	return err
}

// release removes the scope's image of the row; other scopes keep theirs.
func release(ctx context.Context, tx *sql.Tx, scope, table, pk string) error {
	_, err := tx.ExecContext(ctx, `DELETE FROM holds WHERE scope = ? AND table_id = ? AND pk = ?`, scope, table, pk)
	return err
}

// inTx runs fn in one local transaction, committed only when fn succeeds.
func (c *Client) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := c.store.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// storeLayout is the layout version of the local store (PRAGMA user_version). Layout 0
// kept one image per row in a shared rows(table_id, pk, version, row) table; layout 1
// keeps each scope's image on its hold (see the package documentation).
const storeLayout = 1

// initStore creates the store's schema, upgrading a layout 0 store in the same
// transaction: every hold gets the shared image it pointed at, and every scope loses
// its cursor, because a shared image may be older than its scope's position (the very
// bug layout 1 fixes). The old images stay readable until each scope's next Sync
// rebuilds it.
func initStore(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var layout, legacy int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&layout); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rows'`).Scan(&legacy); err != nil {
		return err
	}
	if layout > storeLayout {
		return fmt.Errorf("synchro client: store layout %d is newer than this client's (%d)", layout, storeLayout)
	}
	migrate := layout == 0 && legacy > 0
	if migrate {
		for _, q := range []string{
			`ALTER TABLE holds RENAME TO holds_v0`,
			`DROP INDEX IF EXISTS holds_row`,
			`ALTER TABLE scopes ADD COLUMN synced INTEGER`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("synchro client: upgrade store: %w", err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return err
	}
	if migrate {
		for _, q := range []string{
			`INSERT INTO holds (scope, table_id, pk, version, row)
			 SELECT h.scope, h.table_id, h.pk, r.version, r.row
			   FROM holds_v0 h JOIN rows r ON r.table_id = h.table_id AND r.pk = h.pk`,
			`DROP TABLE holds_v0`,
			`DROP TABLE rows`,
			`UPDATE scopes SET cursor = NULL`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("synchro client: upgrade store: %w", err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, storeLayout)); err != nil {
		return err
	}
	return tx.Commit()
}

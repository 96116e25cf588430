package client_test

// Edge cases of the client library found by an independent review (2026-12-04)
// against CONTRACT.md, the ADR, docs/ and the client's own doc comments. Six were bugs,
// each red before its fix: a rebuild saved before its catch-up pull (a torn replica),
// row images re-encoded in staging, Sync deaf to its context while waiting for the
// scope, StorePath not escaped in the SQLite URI, ClientID counted in bytes, KeyText
// refusing some integer types. The others pin scenarios that were checked and hold.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/tests/testdb"
)

// reviewRPC is a scripted server: handle gets every call and returns the raw jsonb
// text (bytes as the server would send them) or an error.
type reviewRPC struct {
	mu     sync.Mutex
	calls  []reviewCall
	handle func(n int, fn string, args []any) ([]byte, error)
}

type reviewCall struct {
	fn   string
	args []any
}

func (r *reviewRPC) rpc(ctx context.Context, fn string, args ...any) ([]byte, error) {
	r.mu.Lock()
	n := len(r.calls)
	r.calls = append(r.calls, reviewCall{fn: fn, args: append([]any{}, args...)})
	h := r.handle
	r.mu.Unlock()
	return h(n, fn, args)
}

func (r *reviewRPC) count(fn string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.fn == fn {
			n++
		}
	}
	return n
}

func reviewOpen(t *testing.T, rpc func(ctx context.Context, fn string, args ...any) ([]byte, error), mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{
		StorePath:       ":memory:",
		ClientID:        "review",
		Logger:          quietLogger(),
		PageSize:        2,
		RebuildPageSize: 1,
		Backoff:         client.Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxAttempts: 3},
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.OpenWithRPC(context.Background(), cfg, rpc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ---- RED: row images are re-encoded -------------------------------------------------

// The package documents the stored row as "the row image as the server rendered it
// (JSON text)" and Row.Data as "row image as the server rendered it"; CONTRACT.md
// "Row images" makes the rendering canonical ("the same row always renders to the same
// JSON"). The client stages each change with json.Marshal, which compacts the
// RawMessage and HTML-escapes '<', '>' and '&' (and U+2028/9): the replica holds other
// bytes than the server sent, and other bytes than Push returns for the same version.
func TestClientRowImageKeptAsServerRendered(t *testing.T) {
	ctx := context.Background()
	const img = `{"id": 1, "name": "a<b & c>d", "sep": "x\u2028y"}`
	sum := client.Checksum([]client.Row{{Table: "items", PK: "1", Version: "v1"}})
	s := &reviewRPC{handle: func(_ int, fn string, args []any) ([]byte, error) {
		switch fn {
		case "rebuild":
			return []byte(`{"rows": [{"pk": 1, "row": ` + img + `, "table": "items", "version": "v1"}], "cursor": "c:0", "session": "s:1", "checksum": "` + sum + `", "has_more": false}`), nil
		case "pull":
			return []byte(`{"changes": [{"op": "upsert", "pk": 2, "row": ` + strings.Replace(img, `"id": 1`, `"id": 2`, 1) + `, "table": "items", "version": "v1"}], "cursor": "c:1", "has_more": false}`), nil
		}
		return nil, fmt.Errorf("unexpected %s", fn)
	}}
	c := reviewOpen(t, s.rpc, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	r1, ok, err := c.Row(ctx, "items", 1)
	require.NoError(t, err)
	require.True(t, ok)
	r2, ok, err := c.Row(ctx, "items", 2)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, img, string(r1.Data)) // same JSON value ...
	require.Equal(t, img, string(r1.Data), "rebuild row image: bytes as the server rendered them")
	require.Equal(t, strings.Replace(img, `"id": 1`, `"id": 2`, 1), string(r2.Data), "pull row image: bytes as the server rendered them")
}

// The same against the real pack: the replica's image of a row differs, byte for byte,
// from the image synchro.rebuild returned for it.
func TestClientServerRowImageBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	setup(t, db)
	_, err := db.Pool.Exec(ctx, `INSERT INTO public.notes VALUES ('html', 'dave', '<b>Tom & Jerry</b>')`)
	require.NoError(t, err)
	baseline(t, db)

	c := serverClient(t, db, "review-bytes", nil)
	require.NoError(t, c.Subscribe(ctx, "user:dave"))
	require.NoError(t, c.Sync(ctx, "user:dave"))
	var raw []byte
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.rebuild('check', 'user:dave', NULL, 10000)::text`).Scan(&raw))
	var page struct {
		Rows []struct {
			Row json.RawMessage `json:"row"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(raw, &page))
	require.Len(t, page.Rows, 1)
	got, ok, err := c.Row(ctx, "notes", "html")
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, string(page.Rows[0].Row), string(got.Data))
	require.Equal(t, string(page.Rows[0].Row), string(got.Data), "Row.Data is documented as the image as the server rendered it")
}

// ---- RED: a rebuild is committed without the pull that completes it -----------------

// The package documentation: "Each scope's replica is a consistent view of that scope at
// its own stream position" and Rows is "one scope's consistent view". A rebuild lists
// current projections, so "a row changed after P may arrive in its newer state" and only
// the pull from P makes the set consistent again (CONTRACT.md "Rebuild"). The client
// commits the rebuilt set (with cursor P) in its own local transaction before it pulls,
// so a reader between the two, or a replica whose catch-up pull fails, sees a state of
// the scope that existed at no stream position: one transaction's update half applied.
func TestClientRebuildNotCommittedTornBeforeCatchUp(t *testing.T) {
	ctx := context.Background()
	// At P: items/1@v1, items/2@v1. After page 1, one source transaction T updates both
	// rows to v2 (two pull effects after P). Page 2 lists items/2 in its newer state.
	var c *client.Client
	var seenDuringPull []string
	pullFails := true
	s := &reviewRPC{}
	s.handle = func(_ int, fn string, args []any) ([]byte, error) {
		switch fn {
		case "rebuild":
			if args[2].(*string) == nil {
				return []byte(`{"rows": [{"pk": 1, "row": {"id": 1, "v": 1}, "table": "items", "version": "v1"}], "session": "s:1", "has_more": true}`), nil
			}
			sum := client.Checksum([]client.Row{{Table: "items", PK: "1", Version: "v1"}, {Table: "items", PK: "2", Version: "v2"}})
			return []byte(`{"rows": [{"pk": 2, "row": {"id": 2, "v": 2}, "table": "items", "version": "v2"}], "session": "s:2", "cursor": "P", "checksum": "` + sum + `", "has_more": false}`), nil
		case "pull":
			// A concurrent reader of the replica, between the rebuild and its catch-up.
			rows, err := c.Rows(ctx, "s")
			if err != nil {
				return nil, err
			}
			seenDuringPull = keys(rows)
			if pullFails {
				return nil, errors.New("connection reset by peer")
			}
			return []byte(`{"changes": [{"op": "upsert", "pk": 1, "row": {"id": 1, "v": 2}, "table": "items", "version": "v2"}, {"op": "upsert", "pk": 2, "row": {"id": 2, "v": 2}, "table": "items", "version": "v2"}], "cursor": "T", "has_more": false}`), nil
		}
		return nil, fmt.Errorf("unexpected %s", fn)
	}
	c = reviewOpen(t, s.rpc, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.Error(t, c.Sync(ctx, "s"))

	consistent := func(state []string) bool {
		return fmt.Sprint(state) == fmt.Sprint([]string{}) ||
			fmt.Sprint(state) == fmt.Sprint([]string{"items/1@v1", "items/2@v1"}) ||
			fmt.Sprint(state) == fmt.Sprint([]string{"items/1@v2", "items/2@v2"})
	}
	rows, err := c.Rows(ctx, "s")
	require.NoError(t, err)
	after := keys(rows)
	t.Logf("seen by a reader during the catch-up pull: %v; replica after the failed Sync: %v (cursor %s)", seenDuringPull, after, cursorOf(t, c, "s"))
	require.True(t, consistent(seenDuringPull), "a reader saw a state at no stream position: %v", seenDuringPull)
	require.True(t, consistent(after), "the replica keeps a state at no stream position: %v", after)
}

// ---- RED: Sync does not honour its context while waiting for the scope --------------

// Sync takes the scope's sync.Mutex with Lock(), which ignores ctx: a Sync whose context
// is already done blocks for as long as another Sync of the scope runs (up to the whole
// SY503 backoff, ~16 s by default, or a hung server call), instead of returning ctx.Err().
func TestClientSyncHonoursContextWhileWaitingForScope(t *testing.T) {
	ctx := context.Background()
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s := &reviewRPC{handle: func(_ int, fn string, args []any) ([]byte, error) {
		if fn == "rebuild" {
			once.Do(func() { close(entered) })
			<-release
			return []byte(`{"rows": [], "session": "s", "cursor": "c", "checksum": "` + strings.Repeat("0", 64) + `", "has_more": false}`), nil
		}
		return []byte(`{"changes": [], "cursor": "c", "has_more": false}`), nil
	}}
	c := reviewOpen(t, s.rpc, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	first := make(chan error, 1)
	go func() { first <- c.Sync(ctx, "s") }()
	<-entered

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	second := make(chan error, 1)
	go func() { second <- c.Sync(cctx, "s") }()
	var err error
	returnedWhileBlocked := false
	select {
	case err = <-second:
		returnedWhileBlocked = true
	case <-time.After(3 * time.Second): // generous: a correct Sync returns at once
	}
	close(release)
	require.NoError(t, <-first)
	if !returnedWhileBlocked {
		err = <-second
	}
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, returnedWhileBlocked, "a Sync with a done context stayed blocked behind another Sync of the scope")
}

// ---- RED: ClientID length is checked in bytes ----------------------------------------

// Config.ClientID: "1 to 256 characters", as the server checks it (length(client_id)).
// Open counts bytes: a valid id of 200 non-ASCII characters is refused.
func TestClientClientIDLengthInCharacters(t *testing.T) {
	s := newFakeServer(t)
	id := strings.Repeat("é", 200) // 200 characters, 400 bytes
	_, err := client.OpenWithRPC(context.Background(), client.Config{StorePath: ":memory:", ClientID: id, Logger: quietLogger()}, s.rpc)
	require.NoError(t, err, "a client id of 200 characters is within 1 to 256 characters")
}

// ---- RED: StorePath is spliced into a SQLite URI unescaped ---------------------------

// storeDSN builds "file:" + path + "?..." and the driver opens it as a SQLite URI: '#'
// starts a fragment, '?' the query, and %XX is decoded. Two clients with the distinct
// store files ".../a#1.db" and ".../a#2.db" share the one file ".../a": the second sees
// (and would overwrite) the first one's replica and cursors.
func TestClientStorePathIsAPlainPath(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	open := func(path string) *client.Client {
		c, err := client.OpenWithRPC(ctx, client.Config{StorePath: path, ClientID: "c1", Logger: quietLogger()}, s.rpc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a := open(filepath.Join(dir, "a#1.db"))
	require.NoError(t, a.Subscribe(ctx, "s"))
	require.NoError(t, a.Sync(ctx, "s"))

	b := open(filepath.Join(dir, "a#2.db"))
	_, _, err := b.Cursor(ctx, "s")
	require.ErrorIs(t, err, client.ErrNotSubscribed, "another store file must not see this one's scopes")
	_, statErr := os.Stat(filepath.Join(dir, "a#1.db"))
	require.NoError(t, statErr, "the replica is in the file named by StorePath")
}

// ---- RED (minor): KeyText refuses Go integer kinds --------------------------------

// KeyText "accepts a string, a Go integer, a json.Number or the raw JSON of the key"; it
// refuses uint, int8, int16, uint8 and uint16 (and so does Row, which uses it).
func TestClientKeyTextAcceptsEveryGoInteger(t *testing.T) {
	for _, in := range []any{uint(7), int8(7), int16(7), uint8(7), uint16(7)} {
		got, err := client.KeyText(in)
		require.NoError(t, err, "%T", in)
		require.Equal(t, "7", got)
	}
}

// ---- GREEN: scenarios checked that hold ------------------------------------------------

// A pull that gets SY409 on its second page (compaction passed the mid-transfer cursor):
// nothing of the staged first page is applied, the stored cursor is dropped and the
// rebuild starts with a NULL session; the replica then converges.
func TestClientPull409MidTransferDiscardsStagedPages(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	c := openFake(t, s, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	for i := 2; i <= 6; i++ {
		s.upsert("s", "items", i, "v1", "x")
	}
	var sessions []string
	pulls := 0
	s.mu.Lock()
	s.fail = func(fn string, args []any) error {
		switch fn {
		case "pull":
			pulls++
			if pulls == 2 {
				return sqlErr("SY409")
			}
		case "rebuild":
			if p := args[2].(*string); p != nil {
				sessions = append(sessions, *p)
			} else {
				sessions = append(sessions, "<nil>")
			}
		}
		return nil
	}
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, "<nil>", sessions[0], "the rebuild after SY409 starts a new session")
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1", "items/5@v1", "items/6@v1")
	require.Equal(t, 0, stagingCount(t, c))
}

// SY409 durably drops the cursor: a crash (here an apply failure and a reopen of the
// file store) before the rebuild completes resumes with a rebuild, never with the stale
// cursor; the old rows stay readable meanwhile.
func TestClientSY409DropIsDurableAcrossReopen(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	path := filepath.Join(t.TempDir(), "r.db")
	crash := false
	open := func() *client.Client {
		c, err := client.OpenWithRPC(ctx, client.Config{StorePath: path, ClientID: "c1", Logger: quietLogger(),
			Hooks: client.Hooks{ApplyChange: func(string, int64) error {
				if crash {
					return errors.New("power cut")
				}
				return nil
			}}}, s.rpc)
		require.NoError(t, err)
		return c
	}
	c := open()
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	s.mu.Lock()
	failed := false
	s.fail = func(fn string, _ []any) error {
		// The first pull only: the rebuild's own catch-up pull goes through.
		if fn == "pull" && !failed {
			failed = true
			return sqlErr("SY409")
		}
		return nil
	}
	s.mu.Unlock()
	crash = true
	require.ErrorContains(t, c.Sync(ctx, "s"), "power cut")
	require.NoError(t, c.Close())

	crash = false
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	c = open()
	defer c.Close()
	require.Equal(t, "<none>", cursorOf(t, c, "s"))
	requireScope(t, c, "s", "items/1@v1")
	rebuilds := s.calls["rebuild"]
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, rebuilds+1, s.calls["rebuild"])
}

// SY503 on a later page of a pull is retried with that page's cursor (not the saved
// one, not a later one): no change is skipped or duplicated.
func TestClientCapturePendingMidPullRetriesSamePage(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	c := openFake(t, s, nil)
	client.SetSleep(c, func(context.Context, time.Duration) error { return nil })
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	for i := 2; i <= 6; i++ {
		s.upsert("s", "items", i, "v1", "x")
	}
	var cursors []string
	pending := 0
	s.mu.Lock()
	s.fail = func(fn string, args []any) error {
		if fn != "pull" {
			return nil
		}
		cursors = append(cursors, args[2].(string))
		if len(cursors) == 2 && pending == 0 {
			pending++
			return sqlErr("SY503")
		}
		return nil
	}
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, []string{"c:1", "c:3", "c:3", "c:5"}, cursors)
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1", "items/5@v1", "items/6@v1")
	require.Equal(t, "c:6", cursorOf(t, c, "s"))
}

// A checksum mismatch is not retried in a loop: one rebuild session per Sync, no pull,
// nothing applied, ErrChecksumMismatch.
func TestClientChecksumMismatchNoLoop(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	c := openFake(t, s, func(cfg *client.Config) {
		cfg.Hooks.TamperRebuildRow = func(r *client.Row) { r.Version = "forged" }
	})
	require.NoError(t, c.Subscribe(ctx, "s"))
	for i := 1; i <= 3; i++ {
		require.ErrorIs(t, c.Sync(ctx, "s"), client.ErrChecksumMismatch)
		require.Equal(t, i, s.calls["rebuild"])
	}
	require.Zero(t, s.calls["pull"])
	requireScope(t, c, "s")
}

// A server checksum in another spelling (upper case hex) or a missing checksum/cursor on
// the last page is never accepted.
func TestClientLastRebuildPageNeedsChecksumAndCursor(t *testing.T) {
	ctx := context.Background()
	for name, last := range map[string]string{
		"no checksum": `{"rows": [], "session": "s", "cursor": "c", "has_more": false}`,
		"no cursor":   `{"rows": [], "session": "s", "checksum": "` + strings.Repeat("0", 64) + `", "has_more": false}`,
		"bad sum":     `{"rows": [], "session": "s", "cursor": "c", "checksum": "` + strings.Repeat("1", 64) + `", "has_more": false}`,
	} {
		s := &reviewRPC{handle: func(int, string, []any) ([]byte, error) { return []byte(last), nil }}
		c := reviewOpen(t, s.rpc, nil)
		require.NoError(t, c.Subscribe(ctx, "s"))
		require.Error(t, c.Sync(ctx, "s"), name)
		require.Equal(t, "<none>", cursorOf(t, c, "s"), name)
		require.Zero(t, s.count("pull"), name)
	}
}

// Error classification of pull and rebuild by SQLSTATE: SY403 mid-transfer is
// ErrScopeDenied and not retried, a serialization failure or a network error is
// returned as is (no sentinel), and the saved cursor never moves.
func TestClientErrorClassificationMidTransfer(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		err      error
		sentinel error
	}{
		{sqlErr("SY403"), client.ErrScopeDenied},
		{sqlErr("40001"), nil},
		{sqlErr("SY400"), nil},
		{errors.New("connection reset"), nil},
	} {
		s := newFakeServer(t)
		s.upsert("s", "items", 1, "v1", "one")
		c := openFake(t, s, nil)
		require.NoError(t, c.Subscribe(ctx, "s"))
		require.NoError(t, c.Sync(ctx, "s"))
		for i := 2; i <= 5; i++ {
			s.upsert("s", "items", i, "v1", "x")
		}
		pulls := 0
		s.mu.Lock()
		s.fail = func(fn string, _ []any) error {
			if fn == "pull" {
				pulls++
				if pulls == 2 {
					return tc.err
				}
			}
			return nil
		}
		s.mu.Unlock()
		err := c.Sync(ctx, "s")
		require.Error(t, err)
		require.ErrorIs(t, err, tc.err)
		if tc.sentinel != nil {
			require.ErrorIs(t, err, tc.sentinel)
		}
		for _, other := range []error{client.ErrCapturePending, client.ErrRebuildLoop, client.ErrChecksumMismatch, client.ErrIdempotencyConflict, client.ErrClientRetired} {
			require.NotErrorIs(t, err, other)
		}
		require.Equal(t, 2, pulls, "not retried")
		require.Equal(t, "c:1", cursorOf(t, c, "s"))
		requireScope(t, c, "s", "items/1@v1")
	}
}

// Push: a retry after a network error sends byte-identical content for the same ids
// (so the server replays the recorded outcome instead of SY410); push errors keep their
// SQLSTATE; SY503 is not retried by Push; conflict outcomes with an absent row decode as
// documented.
func TestClientPushRetryAndOutcomes(t *testing.T) {
	ctx := context.Background()
	var bodies []string
	fail := errors.New("connection reset")
	var next error
	s := &reviewRPC{handle: func(_ int, fn string, args []any) ([]byte, error) {
		require.Equal(t, "push", fn)
		bodies = append(bodies, args[1].(string))
		if next != nil {
			return nil, next
		}
		return []byte(`{"results": [{"id": "00000000-0000-4000-8000-000000000001", "row": null, "status": "conflict", "version": null}]}`), nil
	}}
	c := reviewOpen(t, s.rpc, nil)
	base := "abc"
	muts := func() []client.Mutation {
		return []client.Mutation{{ID: "00000000-0000-4000-8000-000000000001", Table: "items", Op: "update", PK: int64(7), BaseVersion: &base,
			Row: map[string]any{"z": 1, "a": "x<y", "m": []any{1, "two"}, "b": nil}}}
	}
	next = fail
	_, err := c.Push(ctx, muts())
	require.ErrorIs(t, err, fail)
	next = nil
	res, err := c.Push(ctx, muts())
	require.NoError(t, err)
	require.Equal(t, bodies[0], bodies[1])
	require.Equal(t, "conflict", res[0].Status)
	require.Equal(t, "", res[0].Version)
	require.Equal(t, "null", string(res[0].Row))

	for _, code := range []string{"40001", "SY400", "SY503", "27000", "0A000"} {
		next = sqlErr(code)
		n := len(bodies)
		_, err = c.Push(ctx, muts())
		require.Equal(t, code, sqlStateOf(err))
		require.Equal(t, n+1, len(bodies), "%s: Push does not retry by itself", code)
		require.NotErrorIs(t, err, client.ErrClientRetired)
	}
}

// Concurrent use: Syncs of several scopes and of the same scope, Rows, Row and Push
// from many goroutines; every scope ends exactly at the server's state.
func TestClientConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	scopes := []string{"a", "b", "c"}
	for _, sc := range scopes {
		for i := 1; i <= 5; i++ {
			s.upsert(sc, "items", i, "v1", sc)
		}
	}
	c := openFake(t, s, nil)
	for _, sc := range scopes {
		require.NoError(t, c.Subscribe(ctx, sc))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			sc := scopes[g%len(scopes)]
			for k := 0; k < 5; k++ {
				if g%4 == 0 {
					s.upsert(sc, "items", 10+g*10+k, "v1", "n")
				}
				if err := c.Sync(ctx, sc); err != nil {
					errs <- err
					return
				}
				if _, err := c.Rows(ctx, sc); err != nil {
					errs <- err
					return
				}
				if _, _, err := c.Row(ctx, "items", 1); err != nil {
					errs <- err
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, sc := range scopes {
		require.NoError(t, c.Sync(ctx, sc))
		var want []string
		s.mu.Lock()
		for _, r := range s.rows[sc] {
			k, _ := client.KeyText(r.PK)
			want = append(want, r.Table+"/"+k+"@"+r.Version)
		}
		s.mu.Unlock()
		rows, err := c.Rows(ctx, sc)
		require.NoError(t, err)
		require.ElementsMatch(t, want, keys(rows), sc)
	}
	require.Equal(t, 0, stagingCount(t, c))
}

// A scope added later is rebuilt on its own; the other scopes' cursors and holds do not
// move. A rebuild that returns SY409 on its very first page counts toward MaxRebuilds.
func TestClientScopeAddedLater(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("a", "items", 1, "v1", "a")
	s.upsert("b", "items", 1, "v2", "b")
	c := openFake(t, s, nil)
	require.NoError(t, c.Subscribe(ctx, "a"))
	require.NoError(t, c.Sync(ctx, "a"))
	curA := cursorOf(t, c, "a")
	require.NoError(t, c.Subscribe(ctx, "b"))
	require.NoError(t, c.Subscribe(ctx, "a")) // again: changes nothing
	require.Equal(t, curA, cursorOf(t, c, "a"))
	require.NoError(t, c.Sync(ctx, "b"))
	requireScope(t, c, "a", "items/1@v1")
	requireScope(t, c, "b", "items/1@v2")
	require.Equal(t, curA, cursorOf(t, c, "a"))

	s.mu.Lock()
	s.fail = func(fn string, _ []any) error {
		if fn == "rebuild" {
			return sqlErr("SY409")
		}
		return nil
	}
	s.mu.Unlock()
	require.NoError(t, c.Subscribe(ctx, "new"))
	err := c.Sync(ctx, "new")
	require.ErrorIs(t, err, client.ErrRebuildLoop)
	require.Equal(t, "SY409", sqlStateOf(err))
}

// Context cancellation in the middle of a multi-page pull (between pages) applies
// nothing and keeps the cursor.
func TestClientCancelBetweenPages(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	c := openFake(t, s, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	for i := 2; i <= 6; i++ {
		s.upsert("s", "items", i, "v1", "x")
	}
	cctx, cancel := context.WithCancel(ctx)
	pulls := 0
	s.mu.Lock()
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" {
			pulls++
			if pulls == 2 {
				cancel()
				return context.Canceled
			}
		}
		return nil
	}
	s.mu.Unlock()
	require.ErrorIs(t, c.Sync(cctx, "s"), context.Canceled)
	require.Equal(t, "c:1", cursorOf(t, c, "s"))
	requireScope(t, c, "s", "items/1@v1")
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, "c:6", cursorOf(t, c, "s"))
}

// Against the real pack: uuid and int4 keys, and string keys with JSON escapes, give the
// server's checksum (the client accepts the rebuild) and canonical key text.
func TestClientServerKeyKindsChecksum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE public.u (id uuid PRIMARY KEY, owner text NOT NULL);
CREATE TABLE public.i4 (id int4 PRIMARY KEY, owner text NOT NULL);
CREATE TABLE public.s (id text PRIMARY KEY, owner text NOT NULL);
SELECT synchro.register_table('public.u', 'u');
SELECT synchro.register_table('public.i4', 'i4');
SELECT synchro.register_table('public.s', 's');
SELECT synchro.add_scope_rule('u', 'user:', 'owner');
SELECT synchro.add_scope_rule('i4', 'user:', 'owner');
SELECT synchro.add_scope_rule('s', 'user:', 'owner');
SELECT synchro.activate_registry();
INSERT INTO public.u VALUES ('6F1C0B54-1B7E-4A55-9A3C-0C6F3F1E2D4A', 'x'), ('00000000-0000-4000-8000-000000000001', 'x');
INSERT INTO public.i4 VALUES (-2147483648, 'x'), (2147483647, 'x'), (0, 'x'), (10, 'x'), (9, 'x');
INSERT INTO public.s VALUES (E'quote" back\\ tab\t nl\n', 'x'), ('é<&>', 'x'), ('B', 'x'), ('a', 'x'), ('', 'x');`)
	require.NoError(t, err)
	baseline(t, db)
	c := serverClient(t, db, "review-keys", nil)
	require.NoError(t, c.Subscribe(ctx, "user:x"))
	require.NoError(t, c.Sync(ctx, "user:x"))
	rows, err := c.Rows(ctx, "user:x")
	require.NoError(t, err)
	require.Len(t, rows, 12)
	_, ok, err := c.Row(ctx, "u", "6f1c0b54-1b7e-4a55-9a3c-0c6f3f1e2d4a")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = c.Row(ctx, "s", "quote\" back\\ tab\t nl\n")
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = c.Row(ctx, "i4", int32(-2147483648))
	require.NoError(t, err)
	require.True(t, ok)
	var pgErr *pgconn.PgError
	require.False(t, errors.As(err, &pgErr))
}

// End to end (real pack and runner): a push whose response is lost after the server
// committed is retried with the same mutation ids and gets the recorded outcome (same
// version, nothing written twice); the replica then holds the row once, at that
// version. A multi-row source transaction that moves rows between scopes, pulled one
// change a page (pages stop inside the transaction), converges to the live state.
func TestClientE2ELostPushResponseAndMidTransactionPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, e2eSchema)
	require.NoError(t, err)
	startRunner(t, db)

	lose := true
	rpc := func(ctx context.Context, fn string, args ...any) ([]byte, error) {
		var res string
		var err error
		switch fn {
		case "push":
			err = db.Pool.QueryRow(ctx, `SELECT synchro.push($1, $2::jsonb)::text`, args[0], args[1]).Scan(&res)
			if err == nil && lose {
				lose = false
				return nil, errors.New("read tcp: connection reset by peer") // committed, response lost
			}
		case "pull":
			err = db.Pool.QueryRow(ctx, `SELECT synchro.pull($1, $2, $3, $4)::text`, args[0], args[1], args[2], args[3]).Scan(&res)
		case "rebuild":
			err = db.Pool.QueryRow(ctx, `SELECT synchro.rebuild($1, $2, $3, $4)::text`, args[0], args[1], args[2], args[3]).Scan(&res)
		}
		return []byte(res), err
	}
	c := reviewOpen(t, rpc, func(cfg *client.Config) {
		cfg.PageSize = 1
		cfg.RebuildPageSize = 1
		cfg.Backoff = client.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond, MaxAttempts: 400}
	})
	for _, sc := range []string{"user:alice", "team:red"} {
		require.NoError(t, c.Subscribe(ctx, sc))
		require.NoError(t, c.Sync(ctx, sc))
	}
	muts := []client.Mutation{{ID: "0e0e0e0e-0000-4000-8000-000000000001", Table: "items", Op: "insert", PK: 77,
		Row: map[string]any{"owner": "alice", "team": "red", "name": "seventy-seven"}}}
	_, err = c.Push(ctx, muts)
	require.Error(t, err)
	res, err := c.Push(ctx, muts)
	require.NoError(t, err)
	require.Equal(t, "accepted", res[0].Status, "%+v", res[0])
	var live string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*)::text FROM public.items WHERE id = 77`).Scan(&live))
	require.Equal(t, "1", live)
	require.NoError(t, c.Sync(ctx, "user:alice"))
	r, ok, err := c.Row(ctx, "items", 77)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, res[0].Version, r.Version)

	// One transaction: rows move between owners and teams, one is deleted, one added.
	_, err = db.Pool.Exec(ctx, `
UPDATE public.items SET owner = 'bob' WHERE id = 1;
UPDATE public.items SET owner = 'alice', team = NULL WHERE id = 3;
DELETE FROM public.items WHERE id = 2;
INSERT INTO public.items VALUES (5, 'alice', 'red', 'five');
UPDATE public.items SET name = 'renamed' WHERE id = 77;`)
	require.NoError(t, err)
	for _, tc := range []struct{ scope, col, val string }{{"user:alice", "owner", "alice"}, {"team:red", "team", "red"}} {
		want := map[string]string{}
		rows, err := db.Pool.Query(ctx, `SELECT 'items/' || id, to_jsonb(i)::text FROM public.items i WHERE `+tc.col+` = $1`, tc.val)
		require.NoError(t, err)
		for rows.Next() {
			var k, v string
			require.NoError(t, rows.Scan(&k, &v))
			want[k] = canonJSON(t, []byte(v))
		}
		rows.Close()
		syncUntil(t, c, tc.scope, func() bool {
			return fmt.Sprint(replicaItems(t, c, tc.scope)) == fmt.Sprint(want)
		}, "the replica equals the live scope")
	}
}

// A context cancelled inside the local apply transaction (rebuild and pull) rolls the
// whole apply back: no holds, no cursor; the in-memory store survives it (the driver
// keeps the interrupted connection) and the next Sync completes.
func TestClientCancelDuringApply(t *testing.T) {
	for _, path := range []string{":memory:", filepath.Join(t.TempDir(), "r.db")} {
		ctx := context.Background()
		s := newFakeServer(t)
		for i := 1; i <= 4; i++ {
			s.upsert("s", "items", i, "v1", "x")
		}
		var cancel context.CancelFunc
		cancelAt := int64(2)
		c := openFake(t, s, func(cfg *client.Config) {
			cfg.StorePath = path
			cfg.Hooks.ApplyChange = func(_ string, seq int64) error {
				if seq == cancelAt && cancel != nil {
					cancel()
				}
				return nil
			}
		})
		require.NoError(t, c.Subscribe(ctx, "s"))
		var cctx context.Context
		cctx, cancel = context.WithCancel(ctx)
		require.Error(t, c.Sync(cctx, "s"), path)
		cancel = nil
		requireScope(t, c, "s")
		require.Equal(t, "<none>", cursorOf(t, c, "s"), path)
		require.NoError(t, c.Sync(ctx, "s"), path)
		requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1")

		for i := 5; i <= 8; i++ {
			s.upsert("s", "items", i, "v1", "x")
		}
		cctx, cancel = context.WithCancel(ctx)
		require.Error(t, c.Sync(cctx, "s"), path)
		cancel = nil
		require.Equal(t, "c:4", cursorOf(t, c, "s"), path)
		requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1")
		require.NoError(t, c.Sync(ctx, "s"), path)
		require.Equal(t, "c:8", cursorOf(t, c, "s"), path)
	}
}

package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// ---- checksum ----------------------------------------------------------------

func TestChecksumKnownVector(t *testing.T) {
	rows := []client.Row{
		{Table: "items", PK: "1", Version: "v1"},
		{Table: "items", PK: "10", Version: "v2"},
		{Table: "notes", PK: "a-b", Version: "7/3"},
	}
	// Step by step, independently of the package: h0 = 32 zero bytes, then
	// h = SHA-256(h ‖ table ‖ 0x00 ‖ key ‖ 0x00 ‖ version ‖ 0x0A).
	h := make([]byte, 32)
	for _, r := range rows {
		buf := append([]byte{}, h...)
		buf = append(buf, r.Table...)
		buf = append(buf, 0)
		buf = append(buf, r.PK...)
		buf = append(buf, 0)
		buf = append(buf, r.Version...)
		buf = append(buf, '\n')
		sum := sha256.Sum256(buf)
		h = sum[:]
	}
	require.Equal(t, hex.EncodeToString(h), client.Checksum(rows))
	// The same vector computed outside Go (python hashlib).
	require.Equal(t, "c3d75b3a28a7b6f383f140ef0eb34a2aa1c6841f347ed58de4b8efa8304290d6", client.Checksum(rows))
	require.Equal(t, "d302862d21965e65d9c0787e0664fd5459cbc4d81bb7cbf80b7e605d32534af4", client.Checksum(rows[:1]))
	// An empty scope: h0.
	require.Equal(t, strings.Repeat("0", 64), client.Checksum(nil))
	// Order matters.
	require.NotEqual(t, client.Checksum(rows), client.Checksum([]client.Row{rows[1], rows[0], rows[2]}))
}

func TestKeyText(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want string
	}{
		{json.RawMessage(`42`), "42"},
		{json.RawMessage(`-7`), "-7"},
		{json.RawMessage(`9223372036854775807`), "9223372036854775807"},
		{json.RawMessage(`"00123"`), "00123"},
		{json.RawMessage(`"a\u0062"`), "ab"},
		{json.Number("12"), "12"},
		{"6f1c0b54-1b7e-4a55-9a3c-0c6f3f1e2d4a", "6f1c0b54-1b7e-4a55-9a3c-0c6f3f1e2d4a"},
		{int64(-9223372036854775808), "-9223372036854775808"},
		{7, "7"},
	} {
		got, err := client.KeyText(tc.in)
		require.NoError(t, err, "%v", tc.in)
		require.Equal(t, tc.want, got)
	}
	for _, bad := range []any{json.RawMessage(`1.5`), json.RawMessage(`true`), 1.5, nil} {
		_, err := client.KeyText(bad)
		require.Error(t, err, "%v", bad)
	}
}

// ---- a fake server -----------------------------------------------------------

// fakeRow is a row of the fake server: pk is raw JSON as the server sends it.
type fakeRow struct {
	Table   string          `json:"table"`
	PK      json.RawMessage `json:"pk"`
	Version string          `json:"version"`
	Row     json.RawMessage `json:"row"`
}

type fakeChange struct {
	Table   string          `json:"table"`
	PK      json.RawMessage `json:"pk"`
	Op      string          `json:"op"`
	Version string          `json:"version,omitempty"`
	Row     json.RawMessage `json:"row,omitempty"`
}

// fakeServer speaks the rebuild/pull/push contract over in-memory state: per scope,
// the current rows (what rebuild lists) and the change log (what pull pages through,
// cursor "c:<index>"). Changes added with change() update both.
type fakeServer struct {
	t  *testing.T
	mu sync.Mutex
	// rows[scope] in rebuild order; log[scope] the pull effects.
	rows map[string][]fakeRow
	log  map[string][]fakeChange
	// fail, when set, may fail a call before it is served.
	fail  func(fn string, args []any) error
	calls map[string]int
	// pushes received, as raw JSON.
	pushes []string
}

func newFakeServer(t *testing.T) *fakeServer {
	return &fakeServer{t: t, rows: map[string][]fakeRow{}, log: map[string][]fakeChange{}, calls: map[string]int{}}
}

func rawKey(pk any) json.RawMessage {
	b, _ := json.Marshal(pk)
	return b
}

func rowJSON(pk any, name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"id": %s, "name": %q}`, rawKey(pk), name))
}

// upsert changes (or adds) a row of scope and logs the effect.
func (s *fakeServer) upsert(scope, table string, pk any, version, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := fakeRow{Table: table, PK: rawKey(pk), Version: version, Row: rowJSON(pk, name)}
	replaced := false
	for i, old := range s.rows[scope] {
		if old.Table == table && string(old.PK) == string(r.PK) {
			s.rows[scope][i] = r
			replaced = true
		}
	}
	if !replaced {
		s.rows[scope] = append(s.rows[scope], r)
	}
	s.log[scope] = append(s.log[scope], fakeChange{Table: table, PK: r.PK, Op: "upsert", Version: version, Row: r.Row})
}

// remove deletes a row from scope and logs the effect.
func (s *fakeServer) remove(scope, table string, pk any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := string(rawKey(pk))
	var kept []fakeRow
	for _, old := range s.rows[scope] {
		if !(old.Table == table && string(old.PK) == k) {
			kept = append(kept, old)
		}
	}
	s.rows[scope] = kept
	s.log[scope] = append(s.log[scope], fakeChange{Table: table, PK: rawKey(pk), Op: "delete"})
}

func sqlErr(code string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "fake " + code}
}

func (s *fakeServer) rpc(ctx context.Context, fn string, args ...any) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[fn]++
	if s.fail != nil {
		if err := s.fail(fn, args); err != nil {
			return nil, err
		}
	}
	switch fn {
	case "rebuild":
		scope := args[1].(string)
		limit := args[3].(int)
		off := 0
		if sess := args[2].(*string); sess != nil {
			n, err := strconv.Atoi(strings.TrimPrefix(*sess, "s:"))
			require.NoError(s.t, err)
			off = n
		}
		all := s.rows[scope]
		end := min(off+limit, len(all))
		page := map[string]any{"session": fmt.Sprintf("s:%d", end), "rows": append([]fakeRow{}, all[off:end]...), "has_more": end < len(all)}
		if end == len(all) {
			var rs []client.Row
			for _, r := range all {
				k, err := client.KeyText(r.PK)
				require.NoError(s.t, err)
				rs = append(rs, client.Row{Table: r.Table, PK: k, Version: r.Version})
			}
			page["checksum"] = refChecksum(rs)
			page["cursor"] = fmt.Sprintf("c:%d", len(s.log[scope]))
		}
		return json.Marshal(page)
	case "pull":
		scope := args[1].(string)
		cur := args[2].(string)
		limit := args[3].(int)
		off, err := strconv.Atoi(strings.TrimPrefix(cur, "c:"))
		require.NoError(s.t, err, "cursor %q", cur)
		all := s.log[scope]
		end := min(off+limit, len(all))
		return json.Marshal(map[string]any{"changes": append([]fakeChange{}, all[off:end]...), "cursor": fmt.Sprintf("c:%d", end), "has_more": end < len(all)})
	case "push":
		s.pushes = append(s.pushes, args[1].(string))
		var ms []map[string]any
		require.NoError(s.t, json.Unmarshal([]byte(args[1].(string)), &ms))
		var res []map[string]any
		for _, m := range ms {
			res = append(res, map[string]any{"id": m["id"], "status": "accepted", "version": "pv", "row": m["row"]})
		}
		return json.Marshal(map[string]any{"results": res})
	}
	return nil, fmt.Errorf("fake: unknown function %s", fn)
}

// refChecksum is the checksum computed here, independently of the package.
func refChecksum(rows []client.Row) string {
	h := make([]byte, 32)
	for _, r := range rows {
		s := sha256.New()
		s.Write(h)
		fmt.Fprintf(s, "%s\x00%s\x00%s\n", r.Table, r.PK, r.Version)
		h = s.Sum(nil)
	}
	return hex.EncodeToString(h)
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openFake(t *testing.T, s *fakeServer, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{
		StorePath:       ":memory:",
		ClientID:        "c1",
		Logger:          quietLogger(),
		PageSize:        2,
		RebuildPageSize: 2,
		Backoff:         client.Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond, MaxAttempts: 4},
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.OpenWithRPC(context.Background(), cfg, s.rpc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// keys lists "table/pk@version" of rows.
func keys(rows []client.Row) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Table+"/"+r.PK+"@"+r.Version)
	}
	return out
}

func requireScope(t *testing.T, c *client.Client, scope string, want ...string) {
	t.Helper()
	rows, err := c.Rows(context.Background(), scope)
	require.NoError(t, err)
	if want == nil {
		want = []string{}
	}
	require.Equal(t, want, keys(rows), "scope %s", scope)
}

func requireRow(t *testing.T, c *client.Client, table string, pk any, present bool) {
	t.Helper()
	_, ok, err := c.Row(context.Background(), table, pk)
	require.NoError(t, err)
	require.Equal(t, present, ok, "%s/%v present", table, pk)
}

func stagingCount(t *testing.T, c *client.Client) int {
	t.Helper()
	var n int
	require.NoError(t, client.Store(c).QueryRow(`SELECT count(*) FROM staging`).Scan(&n))
	return n
}

func cursorOf(t *testing.T, c *client.Client, scope string) string {
	t.Helper()
	cur, ok, err := c.Cursor(context.Background(), scope)
	require.NoError(t, err)
	if !ok {
		return "<none>"
	}
	return cur
}

// ---- apply logic ---------------------------------------------------------------

func TestRebuildThenPull(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	for i := 1; i <= 5; i++ {
		s.upsert("s", "items", i, "v1", fmt.Sprint("item ", i))
	}
	s.upsert("s", "notes", "n1", "v1", "note")
	c := openFake(t, s, nil)

	require.ErrorIs(t, c.Sync(ctx, "s"), client.ErrNotSubscribed)
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.Equal(t, "<none>", cursorOf(t, c, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, 3, s.calls["rebuild"], "6 rows in pages of 2")
	require.Equal(t, 1, s.calls["pull"])
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1", "items/5@v1", "notes/n1@v1")
	require.Equal(t, "c:6", cursorOf(t, c, "s"))

	r, ok, err := c.Row(ctx, "items", 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.JSONEq(t, `{"id": 3, "name": "item 3"}`, string(r.Data))

	s.upsert("s", "items", 3, "v2", "three")
	s.remove("s", "items", 4)
	s.upsert("s", "items", 6, "v1", "six")
	require.NoError(t, c.Sync(ctx, "s"))
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v2", "items/5@v1", "items/6@v1", "notes/n1@v1")
	require.Equal(t, "c:9", cursorOf(t, c, "s"))
	require.Equal(t, 0, stagingCount(t, c))

	// Nothing new: one pull, same cursor.
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, "c:9", cursorOf(t, c, "s"))
}

func TestTwoScopesHoldOneRow(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("a", "items", 1, "v1", "shared")
	s.upsert("b", "items", 1, "v1", "shared")
	s.upsert("a", "items", 2, "v1", "only a")
	c := openFake(t, s, nil)
	for _, scope := range []string{"a", "b"} {
		require.NoError(t, c.Subscribe(ctx, scope))
		require.NoError(t, c.Sync(ctx, scope))
	}
	requireScope(t, c, "a", "items/1@v1", "items/2@v1")
	requireScope(t, c, "b", "items/1@v1")

	// A delete in a keeps the row b still holds.
	s.remove("a", "items", 1)
	require.NoError(t, c.Sync(ctx, "a"))
	requireScope(t, c, "a", "items/2@v1")
	requireScope(t, c, "b", "items/1@v1")
	requireRow(t, c, "items", 1, true)

	// An update through b is seen by whoever reads the row.
	s.upsert("b", "items", 1, "v2", "changed")
	require.NoError(t, c.Sync(ctx, "b"))
	r, _, err := c.Row(ctx, "items", 1)
	require.NoError(t, err)
	require.Equal(t, "v2", r.Version)

	// The delete in b too: gone.
	s.remove("b", "items", 1)
	require.NoError(t, c.Sync(ctx, "b"))
	requireScope(t, c, "b")
	requireRow(t, c, "items", 1, false)
	requireRow(t, c, "items", 2, true)
}

func TestRebuildReplacesOnlyItsScopeHolds(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("a", "items", 1, "v1", "shared")
	s.upsert("a", "items", 2, "v1", "only a")
	s.upsert("b", "items", 1, "v1", "shared")
	c := openFake(t, s, nil)
	for _, scope := range []string{"a", "b"} {
		require.NoError(t, c.Subscribe(ctx, scope))
		require.NoError(t, c.Sync(ctx, scope))
	}
	// The server forgets both rows of a (a reset: the log starts anew) and a has
	// to rebuild: the rebuilt set is empty.
	s.mu.Lock()
	s.rows["a"] = nil
	s.log["a"] = nil
	pulls := 0
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" && pulls == 0 {
			pulls++
			return sqlErr("SY409")
		}
		return nil
	}
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "a"))
	requireScope(t, c, "a")
	requireScope(t, c, "b", "items/1@v1")
	requireRow(t, c, "items", 1, true)  // b holds it
	requireRow(t, c, "items", 2, false) // no scope holds it
}

// A scope that is behind delivers an older image of a row another scope already holds
// in a newer state (the stream of "a" ends with the row's v2 and its delete, that of
// "b" with v3). Each scope keeps its own image, so b is not set back to v2 and does
// not have to wait for a change that will never come (found by the model test with
// shared scopes).
func TestLaggingScopeDoesNotOverwriteAnotherScopesImage(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("a", "items", 1, "v1", "one")
	s.upsert("b", "items", 1, "v1", "one")
	c := openFake(t, s, nil)
	for _, scope := range []string{"a", "b"} {
		require.NoError(t, c.Subscribe(ctx, scope))
		require.NoError(t, c.Sync(ctx, scope))
	}
	s.upsert("a", "items", 1, "v2", "two") // the title changes: both scopes
	s.upsert("b", "items", 1, "v2", "two")
	s.remove("a", "items", 1)                // the row leaves a
	s.upsert("b", "items", 1, "v3", "three") // and changes again in b

	require.NoError(t, c.Sync(ctx, "b")) // v2, v3
	requireScope(t, c, "b", "items/1@v3")
	requireScope(t, c, "a", "items/1@v1") // a is at its own position
	require.NoError(t, c.Sync(ctx, "a"))  // v2 (older than b's image), delete
	requireScope(t, c, "a")
	require.NoError(t, c.Sync(ctx, "b")) // nothing new
	requireScope(t, c, "b", "items/1@v3")
	r, ok, err := c.Row(ctx, "items", 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "v3", r.Version)
	require.JSONEq(t, `{"id": 1, "name": "three"}`, string(r.Data))

	// Both scopes hold the row at different positions: each shows its own image,
	// and Row the one of the scope synced last. (The fake server lets a scope stay
	// behind at a later Sync; the real one materializes every scope in commit order.)
	s.upsert("a", "items", 2, "v1", "x")
	s.upsert("b", "items", 2, "v1", "x")
	require.NoError(t, c.Sync(ctx, "a"))
	require.NoError(t, c.Sync(ctx, "b"))
	s.upsert("b", "items", 2, "v2", "y")
	require.NoError(t, c.Sync(ctx, "b"))
	s.upsert("a", "items", 3, "v1", "z")
	require.NoError(t, c.Sync(ctx, "a"))
	requireScope(t, c, "a", "items/2@v1", "items/3@v1")
	requireScope(t, c, "b", "items/1@v3", "items/2@v2")
	r, _, err = c.Row(ctx, "items", 2)
	require.NoError(t, err)
	require.Equal(t, "v1", r.Version, "a synced last")
	require.NoError(t, c.Sync(ctx, "b"))
	r, _, err = c.Row(ctx, "items", 2)
	require.NoError(t, err)
	require.Equal(t, "v2", r.Version, "b synced last")

	// A rebuild of a replaces a's images only.
	s.mu.Lock()
	s.rows["a"] = []fakeRow{{Table: "items", PK: rawKey(2), Version: "v9", Row: rowJSON(2, "rebuilt")}}
	s.log["a"] = nil
	once := true
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" && once {
			once = false
			return sqlErr("SY409")
		}
		return nil
	}
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "a"))
	requireScope(t, c, "a", "items/2@v9")
	requireScope(t, c, "b", "items/1@v3", "items/2@v2")
	requireRow(t, c, "items", 3, false)
}

// A store of layout 0 (one shared rows table) is upgraded by Open: the holds get the
// images they pointed at, readable at once, and every scope is rebuilt at its next
// Sync since a shared image may not be its own.
func TestOpenUpgradesSharedRowsStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = old.Exec(`
CREATE TABLE rows (table_id TEXT NOT NULL, pk TEXT NOT NULL, version TEXT NOT NULL, row TEXT NOT NULL, PRIMARY KEY (table_id, pk));
CREATE TABLE holds (scope TEXT NOT NULL, table_id TEXT NOT NULL, pk TEXT NOT NULL, PRIMARY KEY (scope, table_id, pk));
CREATE INDEX holds_row ON holds (table_id, pk);
CREATE TABLE scopes (scope TEXT PRIMARY KEY, cursor TEXT);
CREATE TABLE staging (scope TEXT NOT NULL, seq INTEGER NOT NULL, change TEXT NOT NULL, PRIMARY KEY (scope, seq));
INSERT INTO rows VALUES ('items', '1', 'v2', '{"id": 1, "name": "stale"}'), ('items', '2', 'v1', '{"id": 2, "name": "two"}');
INSERT INTO holds VALUES ('a', 'items', '1'), ('b', 'items', '1'), ('a', 'items', '2');
INSERT INTO scopes VALUES ('a', 'c:2'), ('b', 'c:9');
INSERT INTO staging VALUES ('a', 0, '{}');`)
	require.NoError(t, err)
	require.NoError(t, old.Close())

	s := newFakeServer(t)
	s.upsert("a", "items", 2, "v1", "two")
	s.upsert("b", "items", 1, "v3", "three")
	open := func() *client.Client {
		c, err := client.OpenWithRPC(ctx, client.Config{StorePath: path, ClientID: "c1", Logger: quietLogger()}, s.rpc)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := open()
	requireScope(t, c, "a", "items/1@v2", "items/2@v1")
	requireScope(t, c, "b", "items/1@v2")
	require.Equal(t, "<none>", cursorOf(t, c, "a"))
	require.Equal(t, "<none>", cursorOf(t, c, "b"))
	var n int
	require.NoError(t, client.Store(c).QueryRow(`SELECT count(*) FROM sqlite_master WHERE name IN ('rows', 'holds_v0')`).Scan(&n))
	require.Zero(t, n)
	require.NoError(t, c.Close())

	// Opening again changes nothing; the Syncs rebuild.
	c = open()
	require.NoError(t, c.Sync(ctx, "a"))
	require.NoError(t, c.Sync(ctx, "b"))
	require.Equal(t, 2, s.calls["rebuild"])
	requireScope(t, c, "a", "items/2@v1")
	requireScope(t, c, "b", "items/1@v3")
	require.Equal(t, "c:1", cursorOf(t, c, "b"))
}

// ---- staging atomicity -----------------------------------------------------------

func TestPullAppliesAllPagesOrNothing(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	var failAt int64 = -1
	c := openFake(t, s, func(cfg *client.Config) {
		cfg.Hooks.ApplyChange = func(scope string, seq int64) error {
			if seq == failAt {
				return errors.New("disk on fire")
			}
			return nil
		}
	})
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	before := cursorOf(t, c, "s")
	require.Equal(t, "c:1", before)

	// Five changes: three pages of two. The apply fails on the fourth change.
	s.upsert("s", "items", 1, "v2", "one again")
	s.upsert("s", "items", 2, "v1", "two")
	s.upsert("s", "items", 3, "v1", "three")
	s.remove("s", "items", 1)
	s.upsert("s", "items", 4, "v1", "four")
	failAt = 3
	err := c.Sync(ctx, "s")
	require.ErrorContains(t, err, "disk on fire")
	requireScope(t, c, "s", "items/1@v1")
	require.Equal(t, before, cursorOf(t, c, "s"))
	require.Equal(t, 0, stagingCount(t, c), "failed transfer's pages are discarded")

	// A failure between pages (the connection drops on the second page): nothing
	// applied either, and the cursor stays.
	failAt = -1
	pulls := 0
	s.mu.Lock()
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" {
			pulls++
			if pulls == 2 {
				return errors.New("connection reset")
			}
		}
		return nil
	}
	s.mu.Unlock()
	require.ErrorContains(t, c.Sync(ctx, "s"), "connection reset")
	requireScope(t, c, "s", "items/1@v1")
	require.Equal(t, before, cursorOf(t, c, "s"))
	require.Zero(t, stagingCount(t, c), "the failed transfer drops the pages it staged")

	// The next Sync fetches everything again.
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	require.NoError(t, c.Sync(ctx, "s"))
	requireScope(t, c, "s", "items/2@v1", "items/3@v1", "items/4@v1")
	requireRow(t, c, "items", 1, false)
	require.Equal(t, "c:6", cursorOf(t, c, "s"))
	require.Equal(t, 0, stagingCount(t, c))
}

func TestRebuildApplyFailureAppliesNothing(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	for i := 1; i <= 5; i++ {
		s.upsert("s", "items", i, "v1", "x")
	}
	fail := true
	c := openFake(t, s, func(cfg *client.Config) {
		cfg.Hooks.ApplyChange = func(_ string, seq int64) error {
			if fail && seq == 4 {
				return errors.New("crash")
			}
			return nil
		}
	})
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.ErrorContains(t, c.Sync(ctx, "s"), "crash")
	requireScope(t, c, "s")
	require.Equal(t, "<none>", cursorOf(t, c, "s"))
	require.Equal(t, 0, stagingCount(t, c))
	fail = false
	require.NoError(t, c.Sync(ctx, "s"))
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1", "items/5@v1")
}

// ---- checksum verification -------------------------------------------------------

func TestRebuildChecksumMismatchAppliesNothing(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	s.upsert("s", "items", 2, "v1", "two")
	s.upsert("s", "items", 3, "v1", "three")
	tamper := false
	c := openFake(t, s, func(cfg *client.Config) {
		cfg.Hooks.TamperRebuildRow = func(r *client.Row) {
			if tamper && r.PK == "2" {
				r.Version = "v9" // a stale or corrupted row in transit
			}
		}
	})
	require.NoError(t, c.Subscribe(ctx, "s"))

	// First rebuild tampered: nothing applied, no cursor.
	tamper = true
	err := c.Sync(ctx, "s")
	require.ErrorIs(t, err, client.ErrChecksumMismatch)
	requireScope(t, c, "s")
	require.Equal(t, "<none>", cursorOf(t, c, "s"))
	require.Equal(t, 0, stagingCount(t, c))
	require.Equal(t, 0, s.calls["pull"])

	// Clean: applied.
	tamper = false
	require.NoError(t, c.Sync(ctx, "s"))
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1")

	// A later rebuild (after SY409) tampered: the previous replica is kept whole.
	s.upsert("s", "items", 1, "v2", "one again")
	s.mu.Lock()
	once := true
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" && once {
			once = false
			return sqlErr("SY409")
		}
		return nil
	}
	s.mu.Unlock()
	tamper = true
	require.ErrorIs(t, c.Sync(ctx, "s"), client.ErrChecksumMismatch)
	requireScope(t, c, "s", "items/1@v1", "items/2@v1", "items/3@v1")
	require.Equal(t, "<none>", cursorOf(t, c, "s"), "still owes a rebuild")

	tamper = false
	require.NoError(t, c.Sync(ctx, "s"))
	requireScope(t, c, "s", "items/1@v2", "items/2@v1", "items/3@v1")
}

// ---- error handling --------------------------------------------------------------

func TestRebuildRequiredIsBounded(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" {
			return sqlErr("SY409") // a server that never stops asking
		}
		return nil
	}
	c := openFake(t, s, func(cfg *client.Config) { cfg.MaxRebuilds = 3 })
	require.NoError(t, c.Subscribe(ctx, "s"))
	err := c.Sync(ctx, "s")
	require.ErrorIs(t, err, client.ErrRebuildLoop)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SY409", pgErr.Code)
	require.Equal(t, 3, s.calls["pull"])
	require.Equal(t, 3*1, s.calls["rebuild"], "three rebuilds of one page each")

	// A rebuild session invalidated mid-way (SY409 on a page) restarts the rebuild.
	s2 := newFakeServer(t)
	for i := 1; i <= 5; i++ {
		s2.upsert("s", "items", i, "v1", "x")
	}
	stale := 1
	s2.fail = func(fn string, args []any) error {
		if fn == "rebuild" && args[2].(*string) != nil && stale > 0 {
			stale--
			return sqlErr("SY409")
		}
		return nil
	}
	c2 := openFake(t, s2, nil)
	require.NoError(t, c2.Subscribe(ctx, "s"))
	require.NoError(t, c2.Sync(ctx, "s"))
	requireScope(t, c2, "s", "items/1@v1", "items/2@v1", "items/3@v1", "items/4@v1", "items/5@v1")
}

func TestCapturePendingBacksOff(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	pending := 2
	s.fail = func(fn string, _ []any) error {
		if pending > 0 {
			pending--
			return sqlErr("SY503")
		}
		return nil
	}
	c := openFake(t, s, nil)
	var slept []time.Duration
	client.SetSleep(c, func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil })
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, []time.Duration{time.Millisecond, 2 * time.Millisecond}, slept)
	requireScope(t, c, "s", "items/1@v1")

	// Pending for good: MaxAttempts calls (4), capped delays, then ErrCapturePending.
	slept = nil
	calls := s.calls["pull"]
	s.mu.Lock()
	s.fail = func(fn string, _ []any) error { return sqlErr("SY503") }
	s.mu.Unlock()
	err := c.Sync(ctx, "s")
	require.ErrorIs(t, err, client.ErrCapturePending)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SY503", pgErr.Code)
	require.Equal(t, 4, s.calls["pull"]-calls)
	require.Equal(t, []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}, slept)
	require.Equal(t, "c:1", cursorOf(t, c, "s"))

	// The context ends the wait.
	client.SetSleep(c, nil)
	c2 := openFake(t, s, func(cfg *client.Config) { cfg.Backoff = client.Backoff{Initial: time.Hour, MaxAttempts: 100} })
	require.NoError(t, c2.Subscribe(ctx, "s"))
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c2.Sync(cctx, "s"), context.DeadlineExceeded)
}

func TestScopeDeniedAndInvalidArgument(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	code := "SY403"
	s.fail = func(string, []any) error { return sqlErr(code) }
	c := openFake(t, s, nil)
	require.NoError(t, c.Subscribe(ctx, "s"))
	err := c.Sync(ctx, "s")
	require.ErrorIs(t, err, client.ErrScopeDenied)
	require.Equal(t, 1, s.calls["rebuild"], "SY403 is not retried")

	code = "SY400"
	err = c.Sync(ctx, "s")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "SY400", pgErr.Code)
	for _, sentinel := range []error{client.ErrScopeDenied, client.ErrCapturePending, client.ErrRebuildLoop, client.ErrChecksumMismatch} {
		require.NotErrorIs(t, err, sentinel)
	}
}

// ---- push ------------------------------------------------------------------------

func TestPushSendsMutationsAndLeavesReplica(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	c := openFake(t, s, nil)
	base := "v1"
	res, err := c.Push(ctx, []client.Mutation{
		{ID: "11111111-1111-4111-8111-111111111111", Table: "items", Op: "insert", PK: 7, Row: map[string]any{"name": "seven"}},
		{ID: "22222222-2222-4222-8222-222222222222", Table: "items", Op: "update", PK: 8, BaseVersion: &base, Row: map[string]any{"name": "eight"}},
		{ID: "33333333-3333-4333-8333-333333333333", Table: "notes", Op: "delete", PK: "n1", BaseVersion: &base},
	})
	require.NoError(t, err)
	require.Len(t, res, 3)
	require.Equal(t, "accepted", res[0].Status)
	require.Equal(t, "pv", res[0].Version)
	require.JSONEq(t, `[
	  {"id": "11111111-1111-4111-8111-111111111111", "table": "items", "op": "insert", "pk": 7, "row": {"name": "seven"}},
	  {"id": "22222222-2222-4222-8222-222222222222", "table": "items", "op": "update", "pk": 8, "base_version": "v1", "row": {"name": "eight"}},
	  {"id": "33333333-3333-4333-8333-333333333333", "table": "notes", "op": "delete", "pk": "n1", "base_version": "v1"}
	]`, s.pushes[0])
	requireRow(t, c, "items", 7, false)

	s.fail = func(string, []any) error { return sqlErr("SY410") }
	_, err = c.Push(ctx, []client.Mutation{{ID: "11111111-1111-4111-8111-111111111111", Table: "items", Op: "insert", PK: 7}})
	require.ErrorIs(t, err, client.ErrIdempotencyConflict)

	// SY409 on push: the client id was retired. Final: no retry, no rebuild.
	s.fail = func(string, []any) error { return sqlErr("SY409") }
	before := s.calls["push"]
	_, err = c.Push(ctx, []client.Mutation{{ID: "44444444-4444-4444-8444-444444444444", Table: "items", Op: "insert", PK: 9}})
	require.ErrorIs(t, err, client.ErrClientRetired)
	require.NotErrorIs(t, err, client.ErrRebuildLoop)
	require.Equal(t, "SY409", sqlStateOf(err))
	require.Equal(t, before+1, s.calls["push"], "a retired client id is not retried")
	require.Zero(t, s.calls["rebuild"], "nothing is rebuilt for it")
}

// sqlStateOf is the SQLSTATE of the server error err wraps.
func sqlStateOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// ---- persistence -----------------------------------------------------------------

func TestFileStoreSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	s := newFakeServer(t)
	s.upsert("s", "items", 1, "v1", "one")
	path := filepath.Join(t.TempDir(), "replica.db")
	open := func() *client.Client {
		c, err := client.OpenWithRPC(ctx, client.Config{StorePath: path, ClientID: "c1", Logger: quietLogger()}, s.rpc)
		require.NoError(t, err)
		return c
	}
	c := open()
	require.NoError(t, c.Subscribe(ctx, "s"))
	require.NoError(t, c.Sync(ctx, "s"))
	require.NoError(t, c.Close())

	c = open()
	defer c.Close()
	requireScope(t, c, "s", "items/1@v1")
	require.Equal(t, "c:1", cursorOf(t, c, "s"))
	s.upsert("s", "items", 2, "v1", "two")
	require.NoError(t, c.Sync(ctx, "s"))
	require.Equal(t, 1, s.calls["rebuild"], "the saved cursor is used, no second rebuild")
	requireScope(t, c, "s", "items/1@v1", "items/2@v1")
}

func jsonField(t *testing.T, raw json.RawMessage, key string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	return fmt.Sprint(m[key])
}

// ---- no key values or scope strings in errors and logs --------------------------

// TestErrorsAndLogsCarryNoScopeOrKey drives the paths that report a scope or a key
// (rebuild required, checksum mismatch, rebuild loop, unsubscribed scope, a malformed
// key) with sentinel values, and requires that neither appears in any error or log line.
func TestErrorsAndLogsCarryNoScopeOrKey(t *testing.T) {
	ctx := context.Background()
	const scope = "user:SENTINEL-scope-7f3a"
	const keySentinel = "SENTINEL-key-9c1d"
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	s := newFakeServer(t)
	s.upsert(scope, "notes", keySentinel, "v1", "one")
	tamper := true
	c := openFake(t, s, func(cfg *client.Config) {
		cfg.Logger = logger
		cfg.MaxRebuilds = 2
		cfg.Hooks.TamperRebuildRow = func(r *client.Row) {
			if tamper {
				r.Version = "v9"
			}
		}
	})
	var errs []error
	errs = append(errs, c.Sync(ctx, scope)) // not subscribed
	require.NoError(t, c.Subscribe(ctx, scope))
	errs = append(errs, c.Sync(ctx, scope)) // checksum mismatch
	tamper = false
	s.fail = func(fn string, _ []any) error {
		if fn == "pull" {
			return sqlErr("SY409")
		}
		return nil
	}
	errs = append(errs, c.Sync(ctx, scope)) // rebuild loop
	_, err := client.KeyText(json.RawMessage(`"` + keySentinel + `"`))
	require.NoError(t, err)
	_, err = client.KeyText(json.RawMessage(`1` + keySentinel))
	errs = append(errs, err)

	for _, err := range errs {
		require.Error(t, err)
		require.NotContains(t, err.Error(), "SENTINEL", "an error carries a scope string or a key value")
	}
	require.NotEmpty(t, logs.String())
	require.NotContains(t, logs.String(), "SENTINEL", "a log line carries a scope string or a key value")
}

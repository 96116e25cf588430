package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// Fuzz targets of the SQL pack (issue 9 item 4). Each prepares one database per fuzz
// process (testdb.New before f.Fuzz) and reuses it for every input; `go test` without
// -fuzz replays the seeds of f.Add and testdata/fuzz/<Target>, and `make fuzz` runs the
// campaigns.

// fuzzText reports whether s can reach a SQL function as text at all: PostgreSQL
// refuses invalid UTF-8 and NUL in text parameters (22021) before any function runs.
func fuzzText(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return false
		}
	}
	return true
}

// fuzzCode is the SQLSTATE of a PostgreSQL error ("" for another error).
func fuzzCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// fuzzExec runs sql on db as the harness's superuser or fails tb.
func fuzzExec(tb testing.TB, db *testdb.DB, sql string, args ...any) {
	tb.Helper()
	if _, err := db.Pool.Exec(context.Background(), sql, args...); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// fuzzAppConn is a session as synchro_app.
func fuzzAppConn(tb testing.TB, db *testdb.DB) *pgx.Conn {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `SET ROLE synchro_app`); err != nil {
		tb.Fatal(err)
	}
	return conn
}

// fuzzReadDB is a database with items in scopes owner:a and owner:b and a stream
// that materialized the baseline and one later transaction; its runner is stopped
// again. It returns the stream's token and owner:'s rule generation, which signed
// seeds name as {g} and {r}.
func fuzzReadDB(tb testing.TB) (db *testdb.DB, streamToken, ruleGen string) {
	tb.Helper()
	ctx := context.Background()
	db = testdb.New(tb)
	fuzzExec(tb, db, `
		CREATE TABLE items (id int8 PRIMARY KEY, owner text, note text);
		CREATE TABLE notes (id text PRIMARY KEY, owner text);
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
		SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO items (id, owner) VALUES (1, 'a'), (2, 'b'), (3, 'a');
		INSERT INTO notes (id, owner) VALUES ('n1', 'a'), ('n:2', 'a');`)
	r, err := runner.New(runner.Config{
		DatabaseURL:       db.URL,
		Slot:              runnerSlot(db),
		Owner:             "fuzz",
		HeartbeatInterval: 250 * time.Millisecond,
		StandbyInterval:   time.Second,
		IdleInterval:      100 * time.Millisecond,
		PollInterval:      10 * time.Millisecond,
		BackoffMin:        20 * time.Millisecond,
		BackoffMax:        300 * time.Millisecond,
		ShutdownTimeout:   5 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				tb.Errorf("fuzz: the runner did not stop")
			}
		})
	}
	defer stop()
	wait := func(what, sql string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var ok bool
			if err := db.Pool.QueryRow(ctx, sql).Scan(&ok); err == nil && ok {
				return
			}
			if time.Now().After(deadline) {
				tb.Fatalf("fuzz: timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("the stream", `SELECT EXISTS (SELECT FROM synchro.progress)`)
	var xid int64
	if err := db.Pool.QueryRow(ctx, `
		WITH w AS (INSERT INTO items (id, owner) VALUES (4, 'a'), (5, 'b') RETURNING 1)
		SELECT pg_current_xact_id()::text::bigint % 4294967296 FROM w LIMIT 1`).Scan(&xid); err != nil {
		tb.Fatal(err)
	}
	wait("the write's materialization", fmt.Sprintf(`SELECT EXISTS (SELECT FROM synchro.txn WHERE xid %% 4294967296 = %d)`, xid))
	stop()
	if err := db.Pool.QueryRow(ctx, `
		SELECT sg.token::text, synchro._scope_rule_generation('owner:a')::text
		  FROM synchro.progress p JOIN synchro.stream_generation sg USING (stream_generation)`).Scan(&streamToken, &ruleGen); err != nil {
		tb.Fatal(err)
	}
	return db, streamToken, ruleGen
}

var fuzzHex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// fuzzPage checks a successful pull or rebuild reply is well-formed.
func fuzzPage(t *testing.T, what string, raw []byte) {
	t.Helper()
	var page struct {
		Changes  *[]change     `json:"changes"`
		Rows     *[]rebuildRow `json:"rows"`
		Cursor   *string       `json:"cursor"`
		Session  *string       `json:"session"`
		HasMore  *bool         `json:"has_more"`
		Checksum *string       `json:"checksum"`
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(&page); err != nil {
		t.Fatalf("%s: reply %s: %v", what, raw, err)
	}
	if page.HasMore == nil {
		t.Fatalf("%s: no has_more: %s", what, raw)
	}
	if what == "pull" {
		if page.Changes == nil || page.Cursor == nil || *page.Cursor == "" || page.Rows != nil || page.Session != nil {
			t.Fatalf("pull: malformed page %s", raw)
		}
		return
	}
	if page.Rows == nil || page.Session == nil || *page.Session == "" || page.Changes != nil {
		t.Fatalf("rebuild: malformed page %s", raw)
	}
	if !*page.HasMore && (page.Cursor == nil || *page.Cursor == "" || page.Checksum == nil || !fuzzHex64.MatchString(*page.Checksum)) {
		t.Fatalf("rebuild: malformed last page %s", raw)
	}
}

// FuzzReaderToken feeds arbitrary cursors and rebuild sessions to synchro.pull and
// synchro.rebuild (as synchro_app): the only acceptable outcomes are a well-formed page,
// SY400 or SY409. With signed set, the token is the input signed with the server key
// (its {g} and {r} replaced by the stream token and the scope's rule generation), so
// the payload parser behind the MAC is fuzzed too.
func FuzzReaderToken(f *testing.F) {
	for _, s := range []struct {
		scope, token string
		signed       bool
		limit        int32
	}{
		{"owner:a", "", false, 10},
		{"owner:a", "not-a-token", false, 10},
		{"owner:a", strings.Repeat("A", 44), false, 10},
		{"owner:a", "c1:{g}:{r}:s", true, 10},
		{"owner:a", "c1:{g}:{r}:t.0/0", true, 1},
		{"owner:a", "c1:{g}:{r}:e.0/1000000.0.0", true, 1},
		{"owner:b", "c1:{g}:{r}:t.FFFFFFFF/FFFFFFFF", true, 10000},
		{"owner:a", "c1:{g}:0:s", true, 10},
		{"owner:a", "r1:{g}:{r}:s::-9223372036854775808::" + strings.Repeat("00", 32), true, 2},
		{"owner:a", "r1:{g}:{r}:t.0/0:items:3:33:" + strings.Repeat("ab", 32), true, 1},
		{"owner:a", "r1:{g}:{r}:t.0/0:notes:0:6e31:" + strings.Repeat("00", 32), true, 1},
		{"owner:a", "r1:{g}:{r}:t.1/0:items:1:31:00", true, 1},
	} {
		f.Add(s.scope, s.token, s.signed, s.limit)
	}
	db, streamToken, ruleGen := fuzzReadDB(f)
	app := fuzzAppConn(f, db)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, scope, token string, signed bool, limit int32) {
		if !fuzzText(scope, token) {
			return
		}
		if signed {
			payload := strings.NewReplacer("{g}", streamToken, "{r}", ruleGen).Replace(token)
			if err := db.Pool.QueryRow(ctx, `SELECT synchro._token($1, $2)`, payload, scope).Scan(&token); err != nil {
				t.Fatalf("sign: %v", err)
			}
		}
		for _, call := range []struct{ what, sql string }{
			{"pull", `SELECT synchro.pull('fuzz', $1, $2, $3)::text`},
			{"rebuild", `SELECT synchro.rebuild('fuzz', $1, $2, $3)::text`},
		} {
			var raw []byte
			err := app.QueryRow(ctx, call.sql, scope, token, limit).Scan(&raw)
			switch code := fuzzCode(err); {
			case err == nil:
				fuzzPage(t, call.what, raw)
			case code == "SY400" || code == "SY409":
			default:
				t.Fatalf("%s(scope %q, token %q, limit %d): want a page, SY400 or SY409, got %v", call.what, scope, token, limit, err)
			}
		}
	})
}

// fuzzPushSchema: tables push may write, with no trap a valid push could fall into
// (no trigger, no index but the keys): every outcome is a result or SY400/SY410.
const fuzzPushSchema = `
CREATE TABLE public.tags (name text PRIMARY KEY, n int4, note text);
CREATE TABLE public.items (id int4 PRIMARY KEY, qty int4 NOT NULL DEFAULT 0 CHECK (qty >= 0), doc jsonb, at timestamptz);
CREATE TABLE public.big (id int8 PRIMARY KEY, body text);
CREATE TABLE public.docs (id uuid PRIMARY KEY, title text);
SELECT synchro.register_table('public.tags', 'tags');
SELECT synchro.register_table('public.items', 'items');
SELECT synchro.register_table('public.big', 'big');
SELECT synchro.register_table('public.docs', 'docs');
SELECT synchro.activate_registry();
INSERT INTO public.tags (name, n) VALUES ('seed', 1);
INSERT INTO public.items (id) VALUES (1);`

// fuzzPushState is everything a push may write, in one statement.
const fuzzPushState = `
SELECT format('%s/%s/%s/%s/%s/%s/%s/%s/%s/%s',
  (SELECT count(*) FROM public.tags), (SELECT count(*) FROM public.items), (SELECT count(*) FROM public.big),
  (SELECT count(*) FROM public.docs), (SELECT count(*) FROM synchro.row_version),
  (SELECT count(*) FROM synchro.write_fence), (SELECT count(*) FROM synchro.push_context),
  (SELECT count(*) FROM synchro.mutation_outcome),
  (SELECT coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = 'synchro' AND sequencename = 'fence_ordinal'),
  (SELECT string_agg(version, ',' ORDER BY relation_id, pk) FROM synchro.row_version))`

// FuzzPushInput feeds arbitrary bytes as the mutations of synchro.push (as
// synchro_app): the only acceptable outcomes are a well-formed result (one entry per
// mutation, each accepted, conflict or rejected with its fields), SY400 with nothing
// written, or SY410. Bytes that are not jsonb never reach push (PostgreSQL refuses the
// cast) and are skipped.
func FuzzPushInput(f *testing.F) {
	for _, s := range []string{
		`[{"id": "00000000-0000-4000-8000-000000000001", "table": "tags", "op": "insert", "pk": "a", "row": {"n": 1}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000002", "table": "tags", "op": "update", "pk": "seed", "base_version": "x", "row": {"n": 2}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000003", "table": "tags", "op": "delete", "pk": "seed", "base_version": "x"}]`,
		`[{"id": "00000000-0000-4000-8000-000000000004", "table": "items", "op": "insert", "pk": 2, "row": {"qty": -1}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000005", "table": "items", "op": "insert", "pk": 3, "row": {"doc": {"a": [1, 2]}, "at": "2026-01-01"}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000006", "table": "big", "op": "insert", "pk": 9223372036854775807, "row": {"body": "b"}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000007", "table": "docs", "op": "insert", "pk": "00000000-0000-4000-8000-0000000000AA"}]`,
		`[{"id": "00000000-0000-4000-8000-000000000008", "table": "items", "op": "insert", "pk": 1e3, "row": {"id": 1000}}]`,
		`[{"id": "00000000-0000-4000-8000-000000000009", "table": "tags", "op": "insert", "pk": "k", "row": {"name": "k", "n": "x"}}]`,
		`[{"id": "00000000-0000-4000-8000-00000000000a", "table": "tags", "op": "insert", "pk": "k2"}, {"id": "00000000-0000-4000-8000-00000000000a", "table": "tags", "op": "insert", "pk": "k3"}]`,
		`[{"id": "00000000-0000-4000-8000-000000000001", "table": "tags", "op": "insert", "pk": "a", "row": {"n": 2}}]`,
		`[{"id": "00000000-0000-4000-8000-00000000000b", "table": "items", "op": "update", "pk": 1, "base_version": "", "row": {}}]`,
		`{"id": 1}`, `[]`, `[1]`, `null`, `"x"`, `[[[[[]]]]]`,
	} {
		f.Add([]byte(s))
	}
	db := testdb.New(f)
	fuzzExec(f, db, fuzzPushSchema)
	app := fuzzAppConn(f, db)
	ctx := context.Background()
	state := func(t *testing.T) string {
		var s string
		if err := db.Pool.QueryRow(ctx, fuzzPushState).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !fuzzText(string(data)) {
			return
		}
		var ms []json.RawMessage
		if err := db.Pool.QueryRow(ctx, `SELECT $1::jsonb::text`, string(data)).Scan(new(string)); err != nil {
			return // not jsonb: PostgreSQL refuses it before push runs
		}
		before := state(t)
		var raw []byte
		err := app.QueryRow(ctx, `SELECT synchro.push('fuzz', $1::jsonb)::text`, string(data)).Scan(&raw)
		switch code := fuzzCode(err); {
		case err == nil:
			if json.Unmarshal(data, &ms) != nil {
				t.Fatalf("push accepted a non-array: %s", data)
			}
			var res struct {
				Results []map[string]json.RawMessage `json:"results"`
			}
			d := json.NewDecoder(bytes.NewReader(raw))
			d.DisallowUnknownFields()
			if err := d.Decode(&res); err != nil || len(res.Results) != len(ms) {
				t.Fatalf("push: malformed result %s for %s (%v)", raw, data, err)
			}
			for i, o := range res.Results {
				var status string
				_ = json.Unmarshal(o["status"], &status)
				want := map[string][]string{
					"accepted": {"id", "status", "version", "row"},
					"conflict": {"id", "status", "version", "row"},
					"rejected": {"id", "status", "code", "reason"},
				}[status]
				if status == "accepted" && o["row"] == nil {
					want = want[:3] // a delete
				}
				if want == nil || len(o) != len(want) {
					t.Fatalf("push: malformed entry %d %s for %s", i, raw, data)
				}
				for _, k := range want {
					if _, ok := o[k]; !ok {
						t.Fatalf("push: entry %d lacks %s: %s", i, k, raw)
					}
				}
			}
		case code == "SY400":
			if after := state(t); after != before {
				t.Fatalf("push: SY400 wrote something (%s -> %s) for %s", before, after, data)
			}
		case code == "SY410":
		default:
			t.Fatalf("push(%q): want a result, SY400 or SY410, got %v", data, err)
		}
	})
}

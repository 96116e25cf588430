package tests

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// Chaos with real concurrency (an independent review's, 2026-12-04; it found no bug):
// several goroutines on separate
// connections write registered tables and the `via` dependency directly, push (CAS
// races, the same mutation id sent from two connections at once, replays), pull and
// rebuild several scopes, compact in a loop with a tiny retention, while the runner
// is stopped and started (in process) or SIGKILLed (a `synchro run` process). After
// quiescing, every replica equals its scope computed from the live tables. Throughout,
// every pulled change is checked against the reader's replica: a change delivered
// twice or a delete of a row the chain never held fails (deliveryChain,
// delivery_helpers_test.go, says which the contract allows).
//
//	go test ./tests/ -run TestChaos -chaos -chaos.seed=42 -chaos.dur=25s -chaos.full   (make chaos)
//
// make test skips them (their interleavings differ on every run); make chaos runs them.
// TestChaosShort, a 4-second in-process run with a fixed seed, is the exception: it
// runs in make test and CI.

var (
	chaosSeed = flag.Int64("chaos.seed", 0, "seed of TestChaos* (0: from the clock)")
	chaosDur  = flag.Duration("chaos.dur", 5*time.Second, "chaos phase of TestChaos* (make chaos: 25s)")
	chaosFull = flag.Bool("chaos.full", false, "also the registry and wal2json variants of TestChaos* (make chaos)")
	chaosOn   = flag.Bool("chaos", false, "run TestChaos* at all (make chaos)")
)

// rcSeed is -chaos.seed, else fixed, else one from the clock.
func rcSeed(t *testing.T, fixed int64) int64 {
	seed := *chaosSeed
	if seed == 0 {
		seed = fixed
	}
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("review chaos seed %d (rerun with -chaos.seed=%d)", seed, seed)
	return seed
}

func rcCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}

func rcCanon(raw []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return "", err
	}
	out, err := json.Marshal(v)
	return string(out), err
}

const rcSeedData = `
INSERT INTO project_members VALUES (1, 1, 'u1'), (2, 2, 'u2'), (3, 3, 'u3'), (4, 1, 'u2'), (5, 4, 'u4'), (6, 5, 'u1');
INSERT INTO tasks (id, project_id, owner, title) SELECT g, g % 5 + 1, 'o' || (g % 3 + 1), 'seed ' || g FROM generate_series(1, 30) g;
INSERT INTO notes (id, owner, body) SELECT 'n' || g, 'o' || (g % 3 + 1), 'seed' FROM generate_series(1, 12) g;`

var rcScopes = []string{"user:u1", "user:u2", "user:u3", "user:u4", "owner:o1", "owner:o2", "owner:o3"}

// rcPush is one decided push call.
type rcPush struct {
	client string
	muts   []map[string]any
	raw    string
}

type rcAccepted struct {
	client, mid, table, pk, op, base, version, row string
}

// rcChaos is the shared state of one chaos run.
type rcChaos struct {
	t    *testing.T
	pool *pgxpool.Pool
	db   *testdb.DB
	seed int64

	mu       sync.Mutex
	pushes   []rcPush // decided calls, to replay
	accepted []rcAccepted
	counts   map[string]int
	mutSeq   atomic.Int64
	registry bool // the registry workload (comments, reviewer)
}

func (c *rcChaos) count(k string, n int) {
	c.mu.Lock()
	c.counts[k] += n
	c.mu.Unlock()
}

func (c *rcChaos) fail(format string, args ...any) {
	c.t.Errorf("seed %d: "+format, append([]any{c.seed}, args...)...)
}

// ---------------------------------------------------------------- direct writers

func (c *rcChaos) owner(rng *rand.Rand) any {
	if rng.Intn(10) == 0 {
		return nil
	}
	return fmt.Sprintf("o%d", 1+rng.Intn(3))
}

func (c *rcChaos) project(rng *rand.Rand) any {
	if rng.Intn(10) == 0 {
		return nil
	}
	return 1 + rng.Intn(5)
}

func (c *rcChaos) statement(rng *rand.Rand) (string, []any) {
	id := 1 + rng.Intn(45)
	if c.registry && rng.Intn(4) == 0 {
		// comments (registered halfway, written all along) and tasks.reviewer (a scope
		// rule added halfway).
		cid := 1 + rng.Intn(60)
		switch rng.Intn(5) {
		case 0:
			return `UPDATE tasks SET reviewer = $2 WHERE id = $1`, []any{id, c.owner(rng)}
		case 1:
			return `INSERT INTO comments (id, owner, body) VALUES ($1, $2, $3)
				ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, body = excluded.body`,
				[]any{cid, c.owner(rng), fmt.Sprintf("c%d", rng.Intn(1000))}
		case 2:
			return `DELETE FROM comments WHERE id = $1`, []any{cid}
		case 3:
			if rng.Intn(3) == 0 {
				return `UPDATE comments SET body = (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 250)) WHERE id = $1`, []any{cid}
			}
			return `UPDATE comments SET owner = $2 WHERE id = $1`, []any{cid, c.owner(rng)}
		default:
			return `UPDATE comments SET body = $2 WHERE id BETWEEN $1 AND $1 + 5`, []any{cid, fmt.Sprintf("cm%d", rng.Intn(1000))}
		}
	}
	switch r := rng.Intn(100); {
	case r < 14:
		return `INSERT INTO tasks (id, project_id, owner, title, v) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET project_id = excluded.project_id, owner = excluded.owner, title = excluded.title, v = tasks.v + 1`,
			[]any{id, c.project(rng), c.owner(rng), fmt.Sprintf("d%d", rng.Intn(1000)), rng.Intn(50)}
	case r < 22:
		return `DELETE FROM tasks WHERE id = $1`, []any{id}
	case r < 32:
		return `UPDATE tasks SET project_id = $2 WHERE id = $1`, []any{id, c.project(rng)}
	case r < 42:
		return `UPDATE tasks SET owner = $2, v = v + 1 WHERE id = $1`, []any{id, c.owner(rng)}
	case r < 48:
		return `UPDATE tasks SET title = $2 WHERE id BETWEEN $1 AND $1 + 3`, []any{id, fmt.Sprintf("m%d", rng.Intn(1000))}
	case r < 52:
		// The same key deleted and inserted again in one statement sequence.
		return `WITH d AS (DELETE FROM tasks WHERE id = $1 RETURNING id) SELECT count(*) FROM d`, []any{id}
	// The via dependency: rows move between user scopes.
	case r < 60:
		return `INSERT INTO project_members VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING`,
			[]any{1 + rng.Intn(14), 1 + rng.Intn(5), fmt.Sprintf("u%d", 1+rng.Intn(4))}
	case r < 66:
		return `DELETE FROM project_members WHERE id = $1`, []any{1 + rng.Intn(14)}
	case r < 73:
		return `UPDATE project_members SET user_id = $2 WHERE id = $1`, []any{1 + rng.Intn(14), fmt.Sprintf("u%d", 1+rng.Intn(4))}
	case r < 80:
		return `UPDATE project_members SET project_id = $2 WHERE id = $1`, []any{1 + rng.Intn(14), 1 + rng.Intn(5)}
	case r < 84:
		return `INSERT INTO notes (id, owner, body) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, body = excluded.body`,
			[]any{fmt.Sprintf("n%d", 1+rng.Intn(16)), c.owner(rng), fmt.Sprintf("b%d", rng.Intn(1000))}
	case r < 86:
		// A large body (stored out of line, TOAST) ...
		return `INSERT INTO notes (id, owner, body) VALUES ($1, $2, (SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 250)))
			ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, body = excluded.body`,
			[]any{fmt.Sprintf("n%d", 1+rng.Intn(16)), c.owner(rng)}
	case r < 88:
		// ... left unchanged by an upsert of the owner only (unchanged TOAST in the WAL).
		return `INSERT INTO notes (id, owner) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner`,
			[]any{fmt.Sprintf("n%d", 1+rng.Intn(16)), c.owner(rng)}
	case r < 93:
		return `DELETE FROM notes WHERE id = $1`, []any{fmt.Sprintf("n%d", 1+rng.Intn(16))}
	default:
		return `UPDATE notes SET owner = $2 WHERE id = $1`, []any{fmt.Sprintf("n%d", 1+rng.Intn(16)), c.owner(rng)}
	}
}

// retryable: errors a concurrent legal workload may get and retry.
func rcRetryable(code string) bool {
	return code == "40P01" || code == "40001"
}

func (c *rcChaos) directLoop(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		n := 1 + rng.Intn(4)
		tx, err := c.pool.Begin(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.fail("direct: begin: %v", err)
			}
			return
		}
		var stmts []string
		for i := 0; i < n && err == nil; i++ {
			sql, args := c.statement(rng)
			stmts = append(stmts, strings.Fields(sql)[0])
			_, err = tx.Exec(ctx, sql, args...)
		}
		if err == nil {
			err = tx.Commit(ctx)
		} else {
			_ = tx.Rollback(context.Background())
		}
		switch {
		case err == nil:
			c.count("direct_txn", 1)
		case ctx.Err() != nil:
			return
		case rcRetryable(rcCode(err)):
			c.count("direct_"+rcCode(err), 1)
		default:
			c.fail("direct transaction %v failed with a non-retryable error: %v", stmts, err)
			return
		}
		time.Sleep(time.Duration(rng.Intn(8)) * time.Millisecond)
	}
}

// ---------------------------------------------------------------- pushers

func (c *rcChaos) mutationID() string {
	n := c.mutSeq.Add(1)
	return fmt.Sprintf("00000000-7e57-4000-8000-%012d", n)
}

// current is a row's current version ("" absent).
func (c *rcChaos) current(ctx context.Context, table, pk string) string {
	var v string
	var deleted bool
	err := c.pool.QueryRow(ctx, `SELECT rv.version, rv.deleted FROM synchro.row_version rv
		WHERE rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = $1) AND rv.pk = $2`, table, pk).Scan(&v, &deleted)
	if err != nil || deleted {
		return ""
	}
	return v
}

func (c *rcChaos) mutation(ctx context.Context, rng *rand.Rand, used map[string]bool) map[string]any {
	table := "tasks"
	var pk any
	var pkText string
	for {
		if rng.Intn(4) == 0 {
			table = "notes"
			s := fmt.Sprintf("n%d", 1+rng.Intn(16))
			pk, pkText = s, s
		} else {
			table = "tasks"
			i := 1 + rng.Intn(45)
			pk, pkText = i, fmt.Sprint(i)
		}
		if !used[table+"/"+pkText] {
			used[table+"/"+pkText] = true
			break
		}
	}
	cur := c.current(ctx, table, pkText)
	m := map[string]any{"id": c.mutationID(), "table": table, "pk": pk}
	op := "update"
	switch r := rng.Intn(10); {
	case r < 3:
		op = "insert"
	case r < 5:
		op = "delete"
	}
	if cur == "" && rng.Intn(3) > 0 {
		op = "insert"
	}
	m["op"] = op
	if op != "insert" {
		base := cur
		if base == "" || rng.Intn(6) == 0 {
			base = "stale-" + fmt.Sprint(rng.Intn(5))
		}
		m["base_version"] = base
	}
	row := map[string]any{}
	if table == "tasks" {
		switch op {
		case "insert":
			row = map[string]any{"project_id": c.project(rng), "owner": c.owner(rng), "title": fmt.Sprintf("p%d", rng.Intn(1000)), "v": rng.Intn(9)}
		case "update":
			row["title"] = fmt.Sprintf("pe%d", rng.Intn(1000))
			if rng.Intn(2) == 0 {
				row["owner"] = c.owner(rng)
			}
			if rng.Intn(2) == 0 {
				row["project_id"] = c.project(rng)
			}
		}
	} else if op != "delete" {
		row = map[string]any{"body": fmt.Sprintf("pb%d", rng.Intn(1000))}
		if op == "insert" || rng.Intn(2) == 0 {
			row["owner"] = c.owner(rng)
		}
	}
	if op != "delete" {
		m["row"] = row
	}
	return m
}

// pushOnce sends muts as client, retrying whole-call retryable failures; "" when the
// run stopped.
func (c *rcChaos) pushOnce(ctx context.Context, client string, muts []map[string]any) (string, bool) {
	for attempt := 0; ; attempt++ {
		raw, err := pushRaw(ctx, c.pool, client, muts)
		if err == nil {
			return raw, true
		}
		if ctx.Err() != nil {
			return "", false
		}
		if rcRetryable(rcCode(err)) && attempt < 50 {
			c.count("push_"+rcCode(err), 1)
			continue
		}
		c.fail("push %s failed: %v (%s)", client, err, rcCode(err))
		return "", false
	}
}

func (c *rcChaos) record(client string, muts []map[string]any, raw string) {
	var res struct {
		Results []pushResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(raw), &res); err != nil || len(res.Results) != len(muts) {
		c.fail("push result %s: %v", raw, err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pushes = append(c.pushes, rcPush{client: client, muts: muts, raw: raw})
	for i, r := range res.Results {
		c.counts["push_"+r.Status]++
		if r.Status == "rejected" {
			c.t.Errorf("seed %d: push rejected for legal data: %s", c.seed, raw)
		}
		if r.Status != "accepted" {
			continue
		}
		m := muts[i]
		a := rcAccepted{client: client, mid: r.ID, table: m["table"].(string), pk: fmt.Sprint(m["pk"]), op: m["op"].(string), version: r.Version}
		if b, ok := m["base_version"].(string); ok {
			a.base = b
		}
		if len(r.Row) > 0 && string(r.Row) != "null" {
			s, err := rcCanon(r.Row)
			if err != nil {
				c.t.Errorf("row %s", r.Row)
			}
			a.row = s
		}
		c.accepted = append(c.accepted, a)
	}
}

// pushLoop: a client's pushes, with same-id concurrent sends, replays and CAS races.
func (c *rcChaos) pushLoop(ctx context.Context, rng *rand.Rand, client, rival string) {
	for ctx.Err() == nil {
		used := map[string]bool{}
		var muts []map[string]any
		for k := 1 + rng.Intn(3); k > 0; k-- {
			muts = append(muts, c.mutation(ctx, rng, used))
		}
		switch r := rng.Intn(10); {
		case r < 3:
			// The same new call from two connections at once: one decides, the other
			// replays; both answers byte-identical.
			var wg sync.WaitGroup
			var raws [2]string
			var oks [2]bool
			for i := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); raws[i], oks[i] = c.pushOnce(ctx, client, muts) }()
			}
			wg.Wait()
			if !oks[0] || !oks[1] {
				return
			}
			if raws[0] != raws[1] {
				c.fail("the same push from two connections answered differently:\n%s\n%s", raws[0], raws[1])
			}
			c.record(client, muts, raws[0])
			c.count("push_same_id_concurrent", 1)
		case r < 4 && len(muts) > 0 && muts[0]["op"] != "delete":
			// One new mutation id sent from two connections at once with different
			// content: one call decides it, the other is SY410 and writes nothing.
			a := []map[string]any{muts[0]}
			bm := map[string]any{}
			for k, v := range muts[0] {
				bm[k] = v
			}
			if muts[0]["table"] == "tasks" {
				bm["row"] = map[string]any{"title": "other content"}
			} else {
				bm["row"] = map[string]any{"body": "other content"}
			}
			calls := [2][]map[string]any{a, {bm}}
			var wg sync.WaitGroup
			var raws [2]string
			var errs [2]error
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for attempt := 0; ; attempt++ {
						raws[i], errs[i] = pushRaw(ctx, c.pool, client, calls[i])
						if errs[i] == nil || !rcRetryable(rcCode(errs[i])) || attempt > 50 {
							return
						}
					}
				}()
			}
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			won := -1
			for i := range 2 {
				if errs[i] == nil {
					if won >= 0 {
						c.fail("one mutation id with two contents was decided twice:\n%s\n%s", raws[0], raws[1])
					}
					won = i
				} else if rcCode(errs[i]) != "SY410" {
					c.fail("a push of a mutation id with other content: %v", errs[i])
				}
			}
			if won < 0 {
				c.fail("neither push of one mutation id decided it: %v / %v", errs[0], errs[1])
				continue
			}
			c.record(client, calls[won], raws[won])
			c.count("push_same_id_other_content", 1)
		case r < 5:
			// CAS race: this client and its rival update one row from the same base.
			if len(muts) == 0 {
				continue
			}
			m := muts[0]
			if m["op"] == "insert" {
				continue
			}
			other := map[string]any{}
			for k, v := range m {
				other[k] = v
			}
			other["id"] = c.mutationID()
			if other["op"] == "update" {
				if other["table"] == "tasks" {
					other["row"] = map[string]any{"title": "rival", "owner": c.owner(rng)}
				} else {
					other["row"] = map[string]any{"body": "rival", "owner": c.owner(rng)}
				}
			}
			var wg sync.WaitGroup
			var raws [2]string
			var oks [2]bool
			calls := [2]struct {
				client string
				muts   []map[string]any
			}{{client, []map[string]any{m}}, {rival, []map[string]any{other}}}
			for i := range 2 {
				wg.Add(1)
				go func() { defer wg.Done(); raws[i], oks[i] = c.pushOnce(ctx, calls[i].client, calls[i].muts) }()
			}
			wg.Wait()
			for i := range 2 {
				if oks[i] {
					c.record(calls[i].client, calls[i].muts, raws[i])
				}
			}
			c.count("push_cas_race", 1)
		default:
			raw, ok := c.pushOnce(ctx, client, muts)
			if !ok {
				return
			}
			c.record(client, muts, raw)
		}
		// A replay of an earlier decided call of this client: byte for byte.
		if rng.Intn(3) == 0 {
			c.mu.Lock()
			var mine []rcPush
			for _, p := range c.pushes {
				if p.client == client {
					mine = append(mine, p)
				}
			}
			c.mu.Unlock()
			if len(mine) > 0 {
				p := mine[rng.Intn(len(mine))]
				raw, ok := c.pushOnce(ctx, client, p.muts)
				if !ok {
					return
				}
				if raw != p.raw {
					c.fail("a replay of a decided push answered differently:\nfirst  %s\nreplay %s", p.raw, raw)
				}
				c.count("push_replay", 1)
			}
		}
		time.Sleep(time.Duration(rng.Intn(15)) * time.Millisecond)
	}
}

// ---------------------------------------------------------------- readers

type rcScope struct {
	scope string
	// deliveryChain: the replica, and whether a pull reached the end since the last
	// rebuild (settled).
	deliveryChain
	cursor   string
	rebuilt  bool // the last thing that happened was a rebuild
	loop409  int  // consecutive rebuilds whose first pull was SY409
	rebuilds int
}

type rcReader struct {
	c       *rcChaos
	id      string
	scopes  []*rcScope
	pending bool // the client pushes: SY503 is expected
	rng     *rand.Rand
}

// rebuild runs a whole rebuild session; false when the caller should retry later.
func (r *rcReader) rebuild(ctx context.Context, s *rcScope) bool {
	for restart := 0; ; restart++ {
		if restart > 50 {
			r.c.fail("%s %s: rebuild restarted %d times in a row (SY409 loop)", r.id, s.scope, restart)
			return false
		}
		max := 1 + r.rng.Intn(9)
		h := make([]byte, 32)
		var rows []rebuildRow
		session := ""
		var last rebuildPage
		ok := true
		for {
			p, err := rebuildRaw(r.c.db, r.id, s.scope, session, max)
			if err != nil {
				switch code := rcCode(err); {
				case code == "SY409":
					r.c.count("rebuild_409", 1)
					ok = false
				case code == "SY503" && (r.pending || ctx.Err() != nil):
					r.c.count("rebuild_503", 1)
					return false
				default:
					if ctx.Err() == nil {
						r.c.fail("%s %s: rebuild page: %v", r.id, s.scope, err)
					}
					return false
				}
				break
			}
			if len(p.Rows) > max || (p.HasMore && len(p.Rows) == 0) {
				r.c.fail("%s %s: rebuild page of %d rows (max %d, has_more %v)", r.id, s.scope, len(p.Rows), max, p.HasMore)
			}
			for _, x := range p.Rows {
				sum := sha256.New()
				sum.Write(h)
				sum.Write([]byte(x.Table + "\x00" + pkText(x.PK) + "\x00" + x.Version + "\n"))
				h = sum.Sum(nil)
			}
			rows = append(rows, p.Rows...)
			if !p.HasMore {
				last = p
				break
			}
			session = p.Session
		}
		if !ok {
			continue
		}
		if got := hex.EncodeToString(h); got != last.Checksum {
			r.c.fail("%s %s: rebuild checksum %s, computed %s", r.id, s.scope, last.Checksum, got)
		}
		seen := map[string]bool{}
		rep := replica{}
		for _, x := range rows {
			if seen[x.key()] {
				r.c.fail("%s %s: rebuild delivered %s twice", r.id, s.scope, x.key())
			}
			seen[x.key()] = true
			img, err := rcCanon(x.Row)
			if err != nil {
				r.c.fail("rebuild row %s", x.Row)
			}
			rep[x.key()] = replicaRow{x.Version, img}
		}
		s.startFrom(rep)
		s.cursor, s.rebuilt = last.Cursor, true
		s.rebuilds++
		r.c.count("rebuild", 1)
		return true
	}
}

// pullToEnd pulls pages until has_more is false; false on SY409 (cursor dropped) or
// SY503.
func (r *rcReader) pullToEnd(ctx context.Context, s *rcScope) bool {
	for {
		max := 1 + r.rng.Intn(9)
		p, err := pullRaw(r.c.db, r.id, s.scope, s.cursor, max)
		if err != nil {
			switch code := rcCode(err); {
			case code == "SY409":
				r.c.count("pull_409", 1)
				if s.rebuilt {
					s.loop409++
					if s.loop409 > 40 {
						r.c.fail("%s %s: %d rebuilds in a row whose cursor was SY409 at once (409 loop)", r.id, s.scope, s.loop409)
					}
				}
				s.cursor = ""
				return false
			case code == "SY503" && (r.pending || ctx.Err() != nil):
				r.c.count("pull_503", 1)
				return false
			default:
				if ctx.Err() == nil {
					r.c.fail("%s %s: pull: %v", r.id, s.scope, err)
				}
				return false
			}
		}
		if len(p.Changes) > max || p.Cursor == "" || (p.HasMore && len(p.Changes) == 0) {
			r.c.fail("%s %s: pull page of %d changes (max %d) has_more %v cursor %q", r.id, s.scope, len(p.Changes), max, p.HasMore, p.Cursor)
		}
		// A change delivered twice, or a delete of a row the chain never held, fails
		// (deliveryChain: once the chain reached the end after its rebuild, the replica
		// is the scope's state at the cursor, and the changes after it are the scope's
		// effects, each once: ADR 001 "resume after the last delivered effect without
		// replaying or skipping another effect", "net membership and pull effects").
		// Before, inside the rebuild window, only keys a pulled change of the chain set
		// are checked: CONTRACT.md "Rebuild": "a row changed after P may arrive in its
		// newer state, and its effect after P arrives again by pull". Compaction, a
		// rule change of the prefix and a lost cursor end the chain (SY409, rebuild),
		// so their re-deliveries fall in a new window.
		from := s.cursor
		for _, ch := range p.Changes {
			var img string
			if ch.Op == "upsert" {
				var err error
				img, err = rcCanon(ch.Row)
				if err != nil || ch.Version == "" {
					r.c.fail("%s %s: upsert %s without version or image", r.id, s.scope, ch.key())
				}
			}
			if bad := s.apply(ch, img); bad != "" {
				r.c.fail("%s %s: pull page of %d changes (max %d) from cursor %s, settled %v: %s", r.id, s.scope, len(p.Changes), max, from, s.settled, bad)
			}
		}
		r.c.count("pulled_changes", len(p.Changes))
		s.cursor = p.Cursor
		s.pageEnd(p.HasMore)
		if !p.HasMore {
			s.rebuilt, s.loop409 = false, 0
			return true
		}
	}
}

// sync brings one scope to the end: rebuild when it has no cursor, then pull.
func (r *rcReader) sync(ctx context.Context, s *rcScope) bool {
	if s.cursor == "" && !r.rebuild(ctx, s) {
		return false
	}
	return r.pullToEnd(ctx, s)
}

func (r *rcReader) loop(ctx context.Context) {
	for ctx.Err() == nil {
		s := r.scopes[r.rng.Intn(len(r.scopes))]
		if r.rng.Intn(25) == 0 {
			s.cursor = "" // the app drops its replica: rebuild while writes go on
		}
		r.sync(ctx, s)
		time.Sleep(time.Duration(r.rng.Intn(20)) * time.Millisecond)
	}
}

// ---------------------------------------------------------------- compactor

func (c *rcChaos) compactLoop(ctx context.Context, rng *rand.Rand, keep string) {
	for ctx.Err() == nil {
		_, err := compactAll(ctx, c.db, keep)
		switch {
		case err == nil:
			c.count("compact", 1)
		case ctx.Err() != nil:
			return
		case rcRetryable(rcCode(err)):
			c.count("compact_"+rcCode(err), 1)
		default:
			c.fail("compact_all: %v", err)
			return
		}
		time.Sleep(time.Duration(20+rng.Intn(80)) * time.Millisecond)
	}
}

// ---------------------------------------------------------------- the run

type rcRunnerCtl interface {
	stop(t *testing.T)  // stop (or kill) the running runner
	start(t *testing.T) // start a runner
}

type rcInProcess struct{ e *syncEnv }

// stop cancels the runner and expects Run to return nil (a clean stop); a stop that
// takes long dumps what the runner is doing.
func (r rcInProcess) stop(t *testing.T) {
	t.Helper()
	rr := r.e.rr
	began := time.Now()
	rr.cancel()
	var err error
	select {
	case err = <-rr.done:
	case <-time.After(3 * time.Second):
		if os.Getenv("SYNCHRO_CHAOS_DEBUG") != "" {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			_ = os.WriteFile(fmt.Sprintf("/tmp/review-chaos-stop-%d.txt", time.Now().UnixNano()), buf[:n], 0o644)
			logClusterActivity(t, r.e.db, "slow stop")
		}
		err = <-rr.done
	}
	rr.stopped, rr.err = true, err
	if err != nil {
		t.Errorf("a clean stop of the runner returned %v after %s", err, time.Since(began).Round(time.Millisecond))
	}
	waitRunnerGone(t, r.e.db)
}
func (r rcInProcess) start(t *testing.T) { r.e.startRunner(t) }

type rcKilled struct {
	bin string
	db  *testdb.DB
	p   *runproc.Proc
}

func (r *rcKilled) stop(t *testing.T) {
	if r.p.Exited() {
		t.Errorf("a runner process exited on its own: %s\n%s", r.p.Exit(), tailLines(r.p.Logs(), 30))
	}
	r.p.Kill()
	waitRunnerGone(t, r.db)
}

func (r *rcKilled) start(t *testing.T) {
	r.p = startProc(t, r.bin, r.db, "", "--batch-bytes", "4096")
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type rcOptions struct {
	keep      string // compaction's keep
	batchRows string // compact_batch_rows
	kill      bool   // SIGKILL runner processes instead of in-process stops
	// registry: a scope rule added and a table being written registered (a projection
	// bootstrap) during the chaos.
	registry bool
	// short: TestChaosShort's form, run without -chaos: a chaos phase of rcShortDur
	// and a fixed seed unless -chaos.seed names one.
	short bool
}

// The short form's chaos phase and seed. The seed's runner schedule (the test
// goroutine's draws) stops the runner at about 1.9 s and again at 3.5 to 4.6 s, so the
// phase lasts about 5 s. Measured on the 2-core development machine under load: two
// stops with a backlog to replay, 400 to 550 direct transactions, 50 to 100 accepted
// pushes, about 60 compactions, and 2,700 to 3,900 pulled changes, most of them after
// the phase from cursors that had reached the end (so every one is checked).
const (
	rcShortDur  = 4 * time.Second
	rcShortSeed = 20261348
)

const rcCommentsSchema = `
CREATE TABLE comments (id int8 PRIMARY KEY, owner text, body text);
INSERT INTO comments SELECT g, 'o' || (g % 3 + 1), CASE WHEN g % 4 = 0 THEN (SELECT string_agg(md5(random()::text || x), '') FROM generate_series(1, 250 + g - g) x) ELSE 'c' END
  FROM generate_series(1, 40) g;`

// rcLiveRegistrySQL is liveScopeSQL with the registry workload's rules: tasks also in
// "owner:<reviewer>", comments in "owner:<owner>".
const rcLiveRegistrySQL = `
SELECT 'notes', n.id, rv.version, to_jsonb(n)::text
  FROM notes n JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'notes') AND rv.pk = n.id
 WHERE 'owner:' || n.owner = $1
UNION ALL
SELECT 'tasks', t.id::text, rv.version, to_jsonb(t)::text
  FROM tasks t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1 OR 'owner:' || t.reviewer = $1
    OR EXISTS (SELECT 1 FROM project_members m WHERE m.project_id = t.project_id AND 'user:' || m.user_id = $1)
UNION ALL
SELECT 'comments', c.id::text, rv.version, to_jsonb(c)::text
  FROM comments c JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'comments') AND rv.pk = c.id::text
 WHERE 'owner:' || c.owner = $1`

// rcOperator runs registry statements, retrying lock conflicts with the writers.
func rcOperator(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	for attempt := 0; ; attempt++ {
		_, err := pool.Exec(context.Background(), sql)
		if err == nil {
			return
		}
		if code := rcCode(err); (rcRetryable(code) || code == "55P03") && attempt < 100 {
			continue
		}
		require.NoError(t, err, sql)
	}
}

func reviewChaos(t *testing.T, opt rcOptions) {
	if !*chaosOn && !opt.short {
		// Not in make test: its interleavings differ on every run, and CI must not turn
		// red on a schedule no one can replay. make chaos runs it (TestChaosShort is
		// the exception, for its duplicate-delivery oracle: see there).
		t.Skip("make chaos (-chaos)")
	}
	dur, fixed := *chaosDur, int64(0)
	if opt.short {
		dur, fixed = rcShortDur, rcShortSeed
	}
	seed := rcSeed(t, fixed)
	rng := rand.New(rand.NewSource(seed))
	extra := rcSeedData
	live := liveScopeSQL
	if opt.registry {
		extra += rcCommentsSchema
		live = rcLiveRegistrySQL
	}
	e := newSyncEnv(t, extra)
	db := e.db
	setSetting(t, db, "compact_batch_rows", opt.batchRows)

	if os.Getenv("SYNCHRO_CHAOS_DEBUG") != "" {
		w := &testLogWriter{t: t}
		t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
		e.cfg.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// A stop finishes the materialization call in flight; after a restart's backlog a
	// batch of a thousand transactions takes seconds on a loaded machine, beyond the
	// tests' usual 5 s (a forced stop then returns context.Canceled).
	e.cfg.ShutdownTimeout = 60 * time.Second
	var ctl rcRunnerCtl = rcInProcess{e}
	if opt.kill {
		bin := runproc.BuildT(t)
		e.stopRunner(t)
		k := &rcKilled{bin: bin, db: db}
		k.start(t)
		ctl = k
	}

	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	defer pool.Close()

	c := &rcChaos{t: t, pool: pool, db: db, seed: seed, counts: map[string]int{}, registry: opt.registry}
	// Readers: plain clients over several scopes, and the pushers' own ids (SY503).
	readers := []*rcReader{
		{id: "reader-a", scopes: string2scopes("user:u1", "user:u2", "owner:o1")},
		{id: "reader-b", scopes: string2scopes("user:u3", "user:u4", "owner:o2", "owner:o3")},
		{id: "reader-c", scopes: string2scopes("user:u1", "owner:o1", "owner:o3")},
		{id: "pusher-1", scopes: string2scopes("owner:o1", "user:u2"), pending: true},
		{id: "pusher-2", scopes: string2scopes("owner:o2", "user:u1"), pending: true},
	}
	for _, r := range readers {
		r.c = c
		r.rng = rand.New(rand.NewSource(rng.Int63()))
		// Registry changes: a rebuild waits (SY503) for the rule's materialization and
		// the projection bootstrap's merge.
		r.pending = r.pending || opt.registry
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }() // a failure of the test goroutine stops the workers first
	for i := 0; i < 3; i++ {
		r := rand.New(rand.NewSource(rng.Int63()))
		wg.Go(func() { c.directLoop(ctx, r) })
	}
	r1, r2 := rand.New(rand.NewSource(rng.Int63())), rand.New(rand.NewSource(rng.Int63()))
	wg.Go(func() { c.pushLoop(ctx, r1, "pusher-1", "pusher-2") })
	wg.Go(func() { c.pushLoop(ctx, r2, "pusher-2", "pusher-1") })
	for _, r := range readers {
		wg.Go(func() { r.loop(ctx) })
	}
	rc := rand.New(rand.NewSource(rng.Int63()))
	wg.Go(func() { c.compactLoop(ctx, rc, opt.keep) })

	// The runner chaos, in the test goroutine.
	began := time.Now()
	stops := 0
	deadline := began.Add(dur)
	step := 0
	for time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(time.Duration(700+rng.Intn(2000)) * time.Millisecond)
		if opt.registry {
			step++
			switch step {
			case 3:
				rcOperator(t, pool, `SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer'); SELECT synchro.activate_registry();`)
				t.Logf("reviewer rule activated at %s", time.Since(began).Round(time.Millisecond))
			case 6:
				rcOperator(t, pool, `SELECT synchro.register_table('comments', 'comments'); SELECT synchro.add_scope_rule('comments', 'owner:', 'owner'); SELECT synchro.activate_registry();`)
				t.Logf("comments registered at %s", time.Since(began).Round(time.Millisecond))
			}
		}
		if rng.Intn(3) > 0 {
			t.Logf("stopping the runner at %s (%s)", time.Since(began).Round(time.Millisecond), time.Now().UTC().Format("15:04:05.000"))
			ctl.stop(t)
			stops++
			time.Sleep(time.Duration(rng.Intn(1200)) * time.Millisecond)
			ctl.start(t)
		}
	}
	cancel()
	wg.Wait()
	t.Logf("chaos phase %s, %d runner stops; counts %v", time.Since(began).Round(time.Second), stops, c.counts)

	// Quiesce: a marker transaction materialized and acknowledged.
	write(t, db, `INSERT INTO project_members VALUES (999, 99, 'marker'); DELETE FROM project_members WHERE id = 999`)
	waitAckedPast(t, db)
	require.Empty(t, quarantines(t, db), "quarantine records")
	if opt.registry {
		require.GreaterOrEqual(t, step, 6, "the registry changes ran")
		waitBootstraps(t, db)
		write(t, db, `INSERT INTO project_members VALUES (999, 99, 'marker'); DELETE FROM project_members WHERE id = 999`)
	}

	check := func(when string, no409 bool) {
		for _, r := range readers {
			r.pending = false // nothing is pending any more
			for _, s := range r.scopes {
				if s.cursor != "" {
					if !r.pullToEnd(context.Background(), s) {
						require.False(t, no409, "%s: %s %s: a pull at the end failed", when, r.id, s.scope)
					}
				}
				if s.cursor == "" {
					require.True(t, r.rebuild(context.Background(), s), "%s: %s %s: rebuild", when, r.id, s.scope)
					require.True(t, r.pullToEnd(context.Background(), s), "%s: %s %s: the cursor of a fresh rebuild fails (409 loop)", when, r.id, s.scope)
				}
				requireReplica(t, liveScope(t, db, live, s.scope), s.rep, fmt.Sprintf("seed %d %s: %s scope %s", seed, when, r.id, s.scope))
			}
		}
	}
	check("after quiescing", false)
	// Compaction to the very end: the cursors at the high-watermark stay good.
	_, err = compactAll(context.Background(), db, "0 seconds")
	require.NoError(t, err)
	check("after a final compaction", true)
	// A fresh client of every scope.
	fresh := &rcReader{c: c, id: "fresh", rng: rand.New(rand.NewSource(seed))}
	for _, sc := range rcScopes {
		s := &rcScope{scope: sc}
		require.True(t, fresh.sync(context.Background(), s))
		requireReplica(t, liveScope(t, db, live, sc), s.rep, fmt.Sprintf("seed %d fresh scope %s", seed, sc))
	}

	c.checkPushOutcomes()
	t.Logf("counts %v", c.counts)
	require.Positive(t, c.counts["push_accepted"])
	require.Positive(t, c.counts["pulled_changes"])
}

func string2scopes(names ...string) []*rcScope {
	var out []*rcScope
	for _, n := range names {
		out = append(out, &rcScope{scope: n})
	}
	return out
}

// checkPushOutcomes: CAS held (one accepted write per base version), versions are
// unique, and a row whose current version is an accepted push's holds that push's row.
func (c *rcChaos) checkPushOutcomes() {
	t := c.t
	ctx := context.Background()
	byBase := map[string]rcAccepted{}
	byVersion := map[string]rcAccepted{}
	for _, a := range c.accepted {
		if a.op != "insert" {
			k := a.table + "/" + a.pk + "@" + a.base
			if o, dup := byBase[k]; dup && o.mid != a.mid {
				c.fail("two accepted writes from one base version: %+v and %+v", o, a)
			}
			byBase[k] = a
		}
		if o, dup := byVersion[a.version]; dup && o.mid != a.mid {
			c.fail("two accepted writes got one version: %+v and %+v", o, a)
		}
		byVersion[a.version] = a
	}
	rows, err := c.pool.Query(ctx, `
		SELECT r.table_id, rv.pk, rv.version, rv.deleted,
		       CASE r.table_id WHEN 'tasks' THEN (SELECT to_jsonb(t)::text FROM tasks t WHERE t.id::text = rv.pk)
		                       ELSE (SELECT to_jsonb(n)::text FROM notes n WHERE n.id = rv.pk) END
		  FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
		 WHERE r.table_id IN ('tasks', 'notes')`)
	require.NoError(t, err)
	defer rows.Close()
	matched := 0
	for rows.Next() {
		var table, pk, version string
		var deleted bool
		var live *string
		require.NoError(t, rows.Scan(&table, &pk, &version, &deleted, &live))
		a, ok := byVersion[version]
		if !ok {
			continue
		}
		matched++
		if a.table != table || a.pk != pk {
			c.fail("version %s of %s/%s was handed to a push of %s/%s", version, table, pk, a.table, a.pk)
			continue
		}
		if a.op == "delete" {
			if !deleted || live != nil {
				c.fail("%s/%s: current version is the accepted delete %s but the row exists", table, pk, a.mid)
			}
			continue
		}
		if deleted || live == nil {
			c.fail("%s/%s: current version is accepted %s %s but the row is gone", table, pk, a.op, a.mid)
			continue
		}
		img, _ := rcCanon([]byte(*live))
		if img != a.row {
			c.fail("%s/%s: current version %s is push %s's, row %s, push answered %s", table, pk, version, a.mid, img, a.row)
		}
	}
	require.NoError(t, rows.Err())
	t.Logf("push outcomes: %d accepted, %d rows still at a pushed version", len(c.accepted), matched)
}

// ---------------------------------------------------------------- tests

// Runner stopped and started in process, compaction keeping one second.
func TestChaosInProcess(t *testing.T) {
	reviewChaos(t, rcOptions{keep: "1 second", batchRows: "40"})
}

// Registry changes during the chaos: a scope rule added to a prefix, and a table that
// writers keep writing registered (projection bootstrap), runner stopped in process.
func TestChaosRegistry(t *testing.T) {
	if !*chaosFull {
		t.Skip("make chaos (-chaos.full)")
	}
	reviewChaos(t, rcOptions{keep: "1 second", batchRows: "40", registry: true})
}

// The in-process chaos under the wal2json decoder.
func TestChaosWal2json(t *testing.T) {
	if !*chaosFull {
		t.Skip("make chaos (-chaos.full)")
	}
	t.Run("decoder=wal2json", func(t *testing.T) {
		testdb.RequireLibrary(t, "wal2json")
		reviewChaos(t, rcOptions{keep: "1 second", batchRows: "40", registry: true})
	})
}

// TestChaosShort is TestChaosInProcess for 4 s, in make test and CI's -short run
// (12 to 16 s alone on a loaded 2-core machine; skipped under -chaos, which runs the
// full forms). It is there for what no deterministic test covers at once: a pull page
// that delivers a change twice or a delete never owed (deliveryChain) while the runner
// is stopped in mid-stream and replays (ADR 001: replay "must not create duplicate
// versions, edges, or effects"), compaction passes live cursors (SY409, rebuild
// windows) and pushes race. The writers' choices are the fixed seed's (-chaos.seed=N
// for others); the threads' interleaving differs on every run, as the marquee's kill
// timing does in CI. Its delivery, replica and push-outcome checks hold in every
// interleaving, so their failure is a bug whatever the timing, named with its seed and
// the rule it breaks. Compaction keeps 2 s, not 1 s: on CI's loaded machine a rebuild of
// many small pages may take over a second, and its cursor must not be compacted away
// 40 times in a row (the 409-loop check).
func TestChaosShort(t *testing.T) {
	if *chaosOn {
		t.Skip("-chaos runs the full forms")
	}
	reviewChaos(t, rcOptions{keep: "2 seconds", batchRows: "40", short: true})
}

// Runner processes SIGKILLed at random moments, compaction keeping 300 ms.
func TestChaosKilled(t *testing.T) {
	reviewChaos(t, rcOptions{keep: "300 milliseconds", batchRows: "25", kill: true})
}

package marquee

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/client"
)

// schema: two synced tables and a capture dependency (tasks reach user:<id> scopes
// through project_members), every one audited. The audit trigger writes, in the same
// source transaction, one row per row change of a registered relation: its xid, the
// relation, key, operation, new image and the version the change was given. It is the
// oracle's independent record of what committed: an audit row exists exactly when its
// source change committed, whatever crashed in between. The version is read from the
// row's reservation (synchro.row_version), which the version fence of this very change
// wrote moments before: AFTER ROW triggers of one event fire in name order, and
// synchro_fence_* sorts before zz_marquee_audit. It is what the source transaction
// committed for that change, so the stream's event and effect versions, which come
// through the WAL, have something to be compared with.
const schema = `
CREATE TABLE project_members (id int8 PRIMARY KEY, project_id int8 NOT NULL, user_id text NOT NULL);
CREATE TABLE tasks (id int8 PRIMARY KEY, project_id int8, owner text, title text, v int NOT NULL DEFAULT 0);
CREATE TABLE notes (id text PRIMARY KEY, owner text, body text);
SELECT synchro.register_dependency('project_members', ARRAY['project_id', 'user_id']::name[]);
SELECT synchro.register_table('tasks', 'tasks');
SELECT synchro.register_table('notes', 'notes');
SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'project_members', 'project_id', 'user_id');
SELECT synchro.add_scope_rule('tasks', 'owner:', 'owner');
SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
SELECT synchro.activate_registry();

CREATE TABLE marquee_audit (
  seq bigserial PRIMARY KEY,
  xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint % 4294967296),
  rel text NOT NULL,
  pk  text NOT NULL,
  op  text NOT NULL,
  new jsonb,
  version text
);
CREATE FUNCTION marquee_audit() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
  k text := CASE WHEN TG_OP = 'DELETE' THEN OLD.id::text ELSE NEW.id::text END;
  ver text;
BEGIN
  SELECT rv.version INTO ver FROM synchro.row_version rv JOIN synchro.relation r USING (relation_id)
   WHERE r.relid = TG_RELID AND rv.pk = k;
  IF TG_OP = 'DELETE' THEN
    INSERT INTO marquee_audit (rel, pk, op, version) VALUES (TG_TABLE_NAME, k, 'delete', ver);
  ELSE
    INSERT INTO marquee_audit (rel, pk, op, new, version) VALUES (TG_TABLE_NAME, k, lower(TG_OP), to_jsonb(NEW), ver);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER zz_marquee_audit AFTER INSERT OR UPDATE OR DELETE ON project_members FOR EACH ROW EXECUTE FUNCTION marquee_audit();
CREATE TRIGGER zz_marquee_audit AFTER INSERT OR UPDATE OR DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION marquee_audit();
CREATE TRIGGER zz_marquee_audit AFTER INSERT OR UPDATE OR DELETE ON notes FOR EACH ROW EXECUTE FUNCTION marquee_audit();

-- The baseline: rows already there at the first start.
INSERT INTO project_members SELECT g, (g - 1) % 4 + 1, 'u' || ((g * 7) % 5 + 1) FROM generate_series(1, 8) g;
INSERT INTO tasks (id, project_id, owner, title) SELECT g, g % 5 + 1, (ARRAY['a','b','c','d'])[g % 4 + 1], 'seed ' || g FROM generate_series(1, 40) g;
INSERT INTO notes (id, owner, body) SELECT 'n' || g, (ARRAY['a','b','c'])[g % 3 + 1], 'seed' FROM generate_series(1, 15) g;
TRUNCATE marquee_audit;
`

var (
	owners = []string{"a", "b", "c", "d"}
	users  = []string{"u1", "u2", "u3", "u4", "u5"}
)

// Key ranges: direct writers and pushers use their own task keys, so a push's base
// version is usually current; everything else collides on purpose.
const (
	taskKeys     = 60   // direct writers: tasks 1..60
	pushTaskBase = 1000 // pushers: 1000 + 100*client + k
	memberKeys   = 16
	noteKeys     = 30
)

// workload runs the concurrent writers until stop.
type workload struct {
	pool    *pgxpool.Pool
	clients []*refClient // reference clients: they sync their scopes and push now and then
	pushers []*refClient // clients that only push, often
	seed    uint64

	txns        atomic.Int64 // direct transactions committed (as far as the writer knows)
	pushes      atomic.Int64 // push calls answered
	activations atomic.Int64 // registry activations committed
	errors      atomic.Int64 // failed writes (PostgreSQL down, killed sessions, conflicts)
	// paused holds the writers back (the conductor arms the idle point: idle
	// boundaries come only while no source transaction streams).
	paused atomic.Bool
	// behind holds them back while the stream is far behind the source (the runner
	// is dead much of the time): the backlog, and the final catch-up, stay bounded.
	behind atomic.Bool

	mu     sync.Mutex
	extras []string // tables registered by activations
}

func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() { w.loop(ctx, 40*time.Millisecond, rand.New(rand.NewPCG(w.seed, uint64(i))), w.direct) })
	}
	wg.Go(func() { w.loop(ctx, 80*time.Millisecond, rand.New(rand.NewPCG(w.seed, 10)), w.mover) })
	for i, c := range append(append([]*refClient{}, w.pushers...), w.clients...) {
		pause := 100 * time.Millisecond
		if i >= len(w.pushers) {
			pause = 1500 * time.Millisecond
		}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.seed, uint64(20+i)))
			w.loop(ctx, pause, rng, func(ctx context.Context, rng *rand.Rand) error { return w.push(ctx, rng, c, i) })
		})
	}
	wg.Go(func() { w.loop(ctx, 4*time.Second, rand.New(rand.NewPCG(w.seed, 30)), w.activate) })
	wg.Go(func() { w.backlog(ctx, 400, 100) })
	wg.Wait()
}

// backlog watches the committed source transactions the stream has not materialized
// yet: above high the writers hold back, below low they go on.
func (w *workload) backlog(ctx context.Context, high, low int) {
	for ctx.Err() == nil {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int
		err := w.pool.QueryRow(qctx, `SELECT (SELECT count(DISTINCT xid) FROM marquee_audit) - (SELECT count(*) FROM synchro.txn)`).Scan(&n)
		cancel()
		if err == nil {
			switch {
			case n > high:
				w.behind.Store(true)
			case n < low:
				w.behind.Store(false)
			}
		}
		sleep(ctx, 250*time.Millisecond)
	}
	w.behind.Store(false)
}

func (w *workload) loop(ctx context.Context, pause time.Duration, rng *rand.Rand, step func(context.Context, *rand.Rand) error) {
	for ctx.Err() == nil {
		if w.paused.Load() || w.behind.Load() {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := step(sctx, rng); err != nil && ctx.Err() == nil {
			w.errors.Add(1)
			// PostgreSQL may be down: back off a little.
			sleep(ctx, 50*time.Millisecond)
		}
		cancel()
		sleep(ctx, pause/2+time.Duration(rng.Int64N(int64(pause))))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (w *workload) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, w.pool, fn)
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// direct: one transaction of 1 to 4 direct statements on tasks and notes: inserts,
// updates (owner changes move rows between owner: scopes, project changes between
// user: scopes), deletes, and now and then a multi-row update.
func (w *workload) direct(ctx context.Context, rng *rand.Rand) error {
	err := w.tx(ctx, func(tx pgx.Tx) error {
		for range 1 + rng.IntN(4) {
			var err error
			task := 1 + rng.IntN(taskKeys)
			note := fmt.Sprintf("n%d", 1+rng.IntN(noteKeys))
			switch rng.IntN(9) {
			case 0, 1:
				_, err = tx.Exec(ctx, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, $2, $3, 'new') ON CONFLICT DO NOTHING`,
					task, 1+rng.IntN(5), pick(rng, owners))
			case 2:
				_, err = tx.Exec(ctx, `UPDATE tasks SET v = v + 1, title = 't' || v WHERE id = $1`, task)
			case 3:
				_, err = tx.Exec(ctx, `UPDATE tasks SET owner = $2 WHERE id = $1`, task, pick(rng, append([]string{""}, owners...)))
			case 4:
				_, err = tx.Exec(ctx, `UPDATE tasks SET project_id = $2 WHERE id = $1`, task, 1+rng.IntN(5))
			case 5:
				_, err = tx.Exec(ctx, `DELETE FROM tasks WHERE id = $1`, task)
			case 6:
				_, err = tx.Exec(ctx, `INSERT INTO notes (id, owner, body) VALUES ($1, $2, 'b') ON CONFLICT DO NOTHING`, note, pick(rng, owners))
			case 7:
				if rng.IntN(2) == 0 {
					_, err = tx.Exec(ctx, `DELETE FROM notes WHERE id = $1`, note)
				} else {
					_, err = tx.Exec(ctx, `UPDATE notes SET owner = $2, body = body || 'x' WHERE id = $1`, note, pick(rng, owners))
				}
			case 8:
				lo := 1 + rng.IntN(taskKeys)
				_, err = tx.Exec(ctx, `UPDATE tasks SET v = v + 1 WHERE id BETWEEN $1 AND $1 + 5`, lo)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		w.txns.Add(1)
	}
	return err
}

// mover changes the dependency: memberships move between projects, join and leave,
// so tasks move between user: scopes without being touched.
func (w *workload) mover(ctx context.Context, rng *rand.Rand) error {
	err := w.tx(ctx, func(tx pgx.Tx) error {
		m := 1 + rng.IntN(memberKeys)
		var err error
		switch rng.IntN(4) {
		case 0, 1:
			_, err = tx.Exec(ctx, `UPDATE project_members SET project_id = $2 WHERE id = $1`, m, 1+rng.IntN(5))
		case 2:
			_, err = tx.Exec(ctx, `INSERT INTO project_members VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, m, 1+rng.IntN(5), pick(rng, users))
		case 3:
			_, err = tx.Exec(ctx, `DELETE FROM project_members WHERE id = $1`, m)
		}
		if err == nil && rng.IntN(3) == 0 {
			// The same transaction touches a task too.
			_, err = tx.Exec(ctx, `UPDATE tasks SET v = v + 1 WHERE id = $1`, 1+rng.IntN(taskKeys))
		}
		return err
	})
	if err == nil {
		w.txns.Add(1)
	}
	return err
}

// push: a client pushes one to three mutations to its own task keys (insert, then
// updates and deletes on the version it was given) and notes shared by everyone.
func (w *workload) push(ctx context.Context, rng *rand.Rand, c *refClient, idx int) error {
	var muts []client.Mutation
	for range 1 + rng.IntN(3) {
		k := pushTaskBase + 100*idx + rng.IntN(20)
		c.mu.Lock()
		ver, known := c.versions[k]
		c.mu.Unlock()
		m := client.Mutation{ID: newUUID(), Table: "tasks", PK: k}
		switch {
		case !known:
			m.Op = "insert"
			m.Row = map[string]any{"project_id": 1 + rng.IntN(5), "owner": pick(rng, owners), "title": "pushed"}
		case rng.IntN(4) == 0:
			m.Op, m.BaseVersion = "delete", &ver
		default:
			m.Op, m.BaseVersion = "update", &ver
			m.Row = map[string]any{"owner": pick(rng, owners), "v": rng.IntN(1000), "project_id": 1 + rng.IntN(5)}
		}
		if rng.IntN(5) == 0 {
			// A shared note, insert or overwrite: conflicts are expected.
			m = client.Mutation{ID: newUUID(), Table: "notes", Op: "insert", PK: fmt.Sprintf("n%d", 1+rng.IntN(noteKeys)),
				Row: map[string]any{"owner": pick(rng, owners), "body": "pushed"}}
		}
		dup := false
		for _, o := range muts {
			if o.PK == m.PK && o.Table == m.Table {
				dup = true
			}
		}
		if !dup {
			muts = append(muts, m)
		}
	}
	res, err := c.c.Push(ctx, muts)
	if err != nil {
		return err
	}
	w.pushes.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range res {
		m := muts[i]
		k, ok := m.PK.(int)
		if !ok {
			continue
		}
		switch {
		case r.Status == "accepted" && m.Op == "delete":
			delete(c.versions, k)
		case r.Status == "accepted":
			c.versions[k] = r.Version
		case r.Status == "conflict" && r.Version != "":
			c.versions[k] = r.Version
		case r.Status == "conflict":
			delete(c.versions, k)
		}
	}
	return nil
}

// activate: now and then a registry activation registers a new table, with an owner:
// rule, in one transaction that also writes rows to it after activate_registry() (they
// belong to the new generation) and touches a registered table before it (the old).
// The owner: prefix changes its membership-rule generation, so every owner: cursor
// becomes stale and clients rebuild.
func (w *workload) activate(ctx context.Context, rng *rand.Rand) error {
	w.mu.Lock()
	n := len(w.extras)
	w.mu.Unlock()
	if n >= 3 {
		return nil
	}
	name := fmt.Sprintf("extra_%d", n+1)
	err := w.tx(ctx, func(tx pgx.Tx) error {
		stmts := []string{
			`UPDATE tasks SET v = v + 1 WHERE id = ` + fmt.Sprint(1+rng.IntN(taskKeys)),
			`CREATE TABLE ` + name + ` (id int8 PRIMARY KEY, owner text, body text)`,
			`CREATE TRIGGER zz_marquee_audit AFTER INSERT OR UPDATE OR DELETE ON ` + name + ` FOR EACH ROW EXECUTE FUNCTION marquee_audit()`,
			`SELECT synchro.register_table('` + name + `', '` + name + `')`,
			`SELECT synchro.add_scope_rule('` + name + `', 'owner:', 'owner')`,
			`SELECT synchro.activate_registry()`,
			`INSERT INTO ` + name + ` (id, owner, body) SELECT g, (ARRAY['a','b','c','d'])[g % 4 + 1], 'x' FROM generate_series(1, 5) g`,
			`UPDATE ` + name + ` SET owner = 'b' WHERE id = 1`,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", strings.Fields(s)[0], err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	w.activations.Add(1)
	w.mu.Lock()
	w.extras = append(w.extras, name)
	w.mu.Unlock()
	// Later transactions write to it too.
	return nil
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = crand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

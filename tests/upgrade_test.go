package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// Upgrade with data (issue 9 item 6, issue 12 item 8): the first release installed
// through plain goose, its own runner (built from the frozen v0.1.0 source) running the
// stream while direct writes and pushes fill it, clients holding a pull cursor and a
// rebuild session token; then the runbook's upgrade (docs/runbook.md "Upgrading"): the
// old runner is stopped (SIGTERM), the pack is upgraded to this build while the writes go
// on, through plain goose with the exported source and, separately, through `synchro
// migrate up` (synchro.Install, what the command runs), and this build's runner starts and
// resumes at the old one's acknowledgement. Every write before, during and after the
// upgrade must reach each client's pull exactly once, the held cursor and token stay
// valid (no SY409: docs/install.md), and the replicas equal the live tables.

const upgradeSchema = `
CREATE TABLE items (id int8 PRIMARY KEY, owner text NOT NULL, note text);
SELECT synchro.register_table('items', 'items');
SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
SELECT synchro.activate_registry();
INSERT INTO items (id, owner, note)
SELECT g, CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END, 'base' || g FROM generate_series(1, 20) g;`

const upgradeLiveSQL = `
SELECT 'items', i.id::text, rv.version, to_jsonb(i)::text
  FROM items i JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'items') AND rv.pk = i.id::text
 WHERE 'owner:' || i.owner = $1`

func TestUpgradeWithData(t *testing.T) {
	t.Parallel()
	// One build of the old release for both subtests (they run in parallel, after it).
	bin := buildRelease(t, "v0.1.0")
	t.Run("PlainGoose", func(t *testing.T) {
		t.Parallel()
		upgradeWithData(t, bin, func(ctx context.Context, db *testdb.DB) error {
			// What a team's pipeline runs (docs/install.md): the prelude once, then goose's
			// Provider over the exported source with the pack's version table and goose's
			// session locker on the install lock.
			if err := synchro.PrepareGoose(ctx, db.SQL); err != nil {
				return err
			}
			locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(synchro.InstallLockID), lock.WithLockTimeout(1, 60))
			if err != nil {
				return err
			}
			p, err := goose.NewProvider(goose.DialectPostgres, db.SQL, synchro.GooseMigrations(),
				goose.WithTableName(synchro.GooseTable), goose.WithSessionLocker(locker))
			if err != nil {
				return err
			}
			_, err = p.Up(ctx)
			return err
		})
	})
	t.Run("MigrateUp", func(t *testing.T) {
		t.Parallel()
		upgradeWithData(t, bin, func(ctx context.Context, db *testdb.DB) error {
			return synchro.Install(ctx, db.SQL)
		})
	})
}

// upgradeWrite is one committed source write and the marker its change carries: the
// note it wrote, or "del:<pk>" for a delete.
type upgradeWrite struct {
	marker string
	scope  string
	phase  string
}

// upgradeWriter writes until stopped, one source transaction per write: inserts,
// updates of its own rows, deletes of baseline rows and pushes.
type upgradeWriter struct {
	mu      sync.Mutex
	writes  []upgradeWrite
	phase   atomic.Value // string
	stop    chan struct{}
	done    chan error
	pushRaw [2]string // the first push's mutations and its recorded result
}

func (w *upgradeWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

func (w *upgradeWriter) record(marker, scope string) {
	w.recordPhase(marker, scope, w.phase.Load().(string))
}

func (w *upgradeWriter) recordPhase(marker, scope, phase string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, upgradeWrite{marker, scope, phase})
}

func startUpgradeWriter(t *testing.T, db *testdb.DB) *upgradeWriter {
	t.Helper()
	w := &upgradeWriter{stop: make(chan struct{}), done: make(chan error, 1)}
	w.phase.Store("before")
	go func() { w.done <- w.run(db) }()
	t.Cleanup(func() {
		select {
		case <-w.stop:
		default:
			close(w.stop)
			<-w.done
		}
	})
	return w
}

func (w *upgradeWriter) run(db *testdb.DB) error {
	ctx := context.Background()
	var own []int64 // rows this writer inserted (never deleted)
	nextBaseline := int64(1)
	for n := 0; ; n++ {
		select {
		case <-w.stop:
			return nil
		default:
		}
		owner := []string{"a", "b"}[n%2]
		marker := fmt.Sprintf("w%d", n)
		var err error
		switch {
		case n%10 == 0: // a push from a client, pk 100000+n
			muts := fmt.Sprintf(`[{"id": %q, "table": "items", "op": "insert", "pk": %d, "row": {"owner": %q, "note": %q}}]`,
				pushID(), 100000+n, owner, marker)
			var raw string
			raw, err = pushRawOn(ctx, db.Pool, "pusher", muts)
			if err == nil {
				var res struct {
					Results []struct {
						Status string `json:"status"`
					} `json:"results"`
				}
				if err = json.Unmarshal([]byte(raw), &res); err == nil && (len(res.Results) != 1 || res.Results[0].Status != "accepted") {
					err = fmt.Errorf("push not accepted: %s", raw)
				}
				if w.pushRaw[0] == "" {
					w.pushRaw = [2]string{muts, raw}
				}
			}
		case n%10 == 1 && nextBaseline <= 20: // delete a baseline row, each once
			id := nextBaseline
			nextBaseline++
			owner = []string{"a", "b"}[id%2] // baseline: even ids are a's
			marker = fmt.Sprintf("del:%d", id)
			_, err = db.Pool.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
		case n%10 >= 2 && n%10 <= 4 && len(own) > 0: // update one of its rows
			id := own[n%len(own)]
			err = db.Pool.QueryRow(ctx, `UPDATE items SET note = $2 WHERE id = $1 RETURNING owner`, id, marker).Scan(&owner)
		default:
			id := int64(1000 + n)
			_, err = db.Pool.Exec(ctx, `INSERT INTO items (id, owner, note) VALUES ($1, $2, $3)`, id, owner, marker)
			own = append(own, id)
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001") {
			// The upgrade's DDL and this write can deadlock; PostgreSQL aborts one
			// side and nothing of the write happened: an application retries it.
			time.Sleep(10 * time.Millisecond)
			n--
			continue
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", marker, err)
		}
		w.record(marker, "owner:"+owner)
	}
}

func (w *upgradeWriter) waitCount(t *testing.T, n int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%d writes", n), func() bool {
		select {
		case err := <-w.done:
			w.done <- err // for the cleanup, which waits for it
			t.Fatalf("writer stopped: %v", err)
		default:
		}
		return w.count() >= n
	})
}

func (w *upgradeWriter) finish(t *testing.T) []upgradeWrite {
	t.Helper()
	close(w.stop)
	require.NoError(t, <-w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]upgradeWrite(nil), w.writes...)
}

// markerOf is the marker a pull change carries.
func markerOf(t *testing.T, c change) string {
	t.Helper()
	if c.Op == "delete" {
		return "del:" + pkText(c.PK)
	}
	var row struct {
		Note string `json:"note"`
	}
	require.NoError(t, json.Unmarshal(c.Row, &row))
	return row.Note
}

// buildRelease builds a release's `synchro` command from its frozen source
// (tests/testdata/releases/<release>/src: the module as it was at the release).
func buildRelease(t *testing.T, release string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "synchro-"+release)
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/synchro")
	cmd.Dir = filepath.Join(releaseDir(release), "src")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build %s: %s", release, out)
	return bin
}

// releaseRunner is `synchro run` of an older release, as a process.
type releaseRunner struct {
	cmd     *exec.Cmd
	done    chan error
	stopped bool
}

func startReleaseRunner(t *testing.T, bin string, db *testdb.DB, logs io.Writer) *releaseRunner {
	t.Helper()
	cmd := exec.Command(bin, "run", "--database-url", db.URL, "--slot", runnerSlot(db), "--listen", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	r := &releaseRunner{cmd: cmd, done: make(chan error, 1)}
	go func() { r.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if !r.stopped {
			_ = cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// stop sends SIGTERM and requires a clean exit (status 0).
func (r *releaseRunner) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-r.done:
		r.stopped = true
		require.NoError(t, err, "the old runner exits 0 on SIGTERM")
	case <-time.After(30 * time.Second):
		t.Fatal("the old runner did not stop")
	}
}

func upgradeWithData(t *testing.T, bin string, upgrade func(context.Context, *testdb.DB) error) {
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	installV010(t, db)
	mustExec(t, db, upgradeSchema)

	lw := &testLogWriter{t: t}
	t.Cleanup(func() { lw.mu.Lock(); lw.done = true; lw.mu.Unlock() })
	old := startReleaseRunner(t, bin, db, lw)
	waitStream(t, db)

	// Client A rebuilt owner:a and holds its cursor; client B holds the session token of
	// an unfinished rebuild of owner:b. Both before any write.
	repA, curA := startScope(t, db, "reader-a", "owner:a")
	pageB := mustRebuildPage(t, db, "reader-b", "owner:b", "", 3)
	require.True(t, pageB.HasMore)
	rowsB := append([]rebuildRow(nil), pageB.Rows...)

	w := startUpgradeWriter(t, db)
	w.waitCount(t, 40)
	// A pulls part of the stream (one page) and holds the newer cursor.
	var changesA []change
	eventually(t, 10*time.Second, "a first page of changes for A", func() bool {
		p := mustPull(t, db, "reader-a", "owner:a", curA, 5)
		changesA = append(changesA, p.Changes...)
		curA = p.Cursor
		return len(changesA) > 0
	})

	// The runbook: stop the old runner (it acknowledges what it materialized); the
	// writes go on, the WAL keeps them for the new runner.
	old.stop(t)
	waitRunnerGone(t, db)

	// A source transaction open across the whole upgrade.
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `INSERT INTO items (id, owner, note) VALUES (999999, 'a', 'held')`)
	require.NoError(t, err)

	w.phase.Store("during")
	upCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = upgrade(upCtx, db)
	for attempt := 1; attempt < 5; attempt++ {
		// A migration's DDL can still deadlock with an application write (PostgreSQL
		// aborts one side; each migration is its own transaction, so the applied ones
		// stay applied): a deploy retries, as docs/install.md says.
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			break
		}
		t.Logf("upgrade deadlocked with a write (%s): retried", pgErr.Code)
		err = upgrade(upCtx, db)
	}
	require.NoError(t, err, "the upgrade")
	cancel()
	w.phase.Store("after")
	require.NoError(t, held.Commit(ctx))
	w.recordPhase("held", "owner:a", "spanning")

	// The upgrade moved goose's history into schema synchro and applied the newer
	// migrations: it is this build's install.
	require.NotContains(t, relationsIn(t, db, "public"), "synchro_goose_version")
	require.Equal(t, packVersions(t), appliedVersions(t, db))

	// This build's runner starts where the old one acknowledged, materializes what was
	// written meanwhile and carries on.
	cfg := testRunnerConfig(t, db)
	cfg.PollInterval = 5 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelWarn}))
	startRunner(t, cfg)
	write(t, db, `INSERT INTO items (id, owner, note) VALUES (999998, 'b', 'after-upgrade')`)
	w.record("after-upgrade", "owner:b")
	w.waitCount(t, w.count()+30)
	writes := w.finish(t)
	// A last write; once it is materialized, every earlier commit is (commit order).
	write(t, db, `INSERT INTO items (id, owner, note) VALUES (999997, 'b', 'last')`)
	writes = append(writes, upgradeWrite{"last", "owner:b", "after"})
	eventually(t, 15*time.Second, "readiness after the upgrade", func() bool {
		var ready bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ready))
		return ready
	})

	// The push outcome recorded before the upgrade is answered byte for byte after it.
	again, err := pushRawOn(ctx, db.Pool, "pusher", w.pushRaw[0])
	require.NoError(t, err)
	require.Equal(t, w.pushRaw[1], again)

	// A resumes from the cursor it held across the upgrade (valid: no SY409).
	rest, _ := pullAll(t, db, "reader-a", "owner:a", curA, 50)
	changesA = append(changesA, rest...)
	repA.apply(t, changesA)
	requireReplica(t, liveScope(t, db, upgradeLiveSQL, "owner:a"), repA, "client A")

	// B resumes its rebuild session with the token it held (valid: no SY409), checks the
	// checksum, then pulls from the rebuild's cursor.
	session := pageB.Session
	for {
		p := mustRebuildPage(t, db, "reader-b", "owner:b", session, 3)
		rowsB = append(rowsB, p.Rows...)
		if !p.HasMore {
			require.Equal(t, chainChecksum(rowsB), p.Checksum)
			changesB, _ := pullAll(t, db, "reader-b", "owner:b", p.Cursor, 50)
			repB := replica{}
			repB.applyRebuild(t, rowsB)
			repB.apply(t, changesB)
			requireReplica(t, liveScope(t, db, upgradeLiveSQL, "owner:b"), repB, "client B")
			break
		}
		session = p.Session
	}

	// Every write reached A's pull exactly once (A's cursor predates every write), and
	// nothing else did. B's session position also predates every write, but rows it
	// pages after a write may carry it, so B is checked by its replica above.
	phases := map[string]int{}
	want := map[string]int{}
	for _, wr := range writes {
		phases[wr.phase]++
		if wr.scope == "owner:a" {
			want[wr.marker]++
		}
	}
	got := map[string]int{}
	for _, c := range changesA {
		got[markerOf(t, c)]++
	}
	for m, n := range want {
		require.Equal(t, 1, n, "marker %s written once", m)
		require.Equal(t, 1, got[m], "write %s pulled exactly once", m)
	}
	for m := range got {
		require.Contains(t, want, m, "pulled change %s is a write of scope owner:a", m)
	}
	t.Logf("writes by phase: %v; changes pulled by A: %d", phases, len(changesA))
}

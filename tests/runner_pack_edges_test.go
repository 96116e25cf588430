package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// A runner streaming under write load while the same release's install runs again and
// again (synchro.Install: goose with nothing to apply, every function file re-applied,
// the fence refresh): nothing is refused, quarantined or stalled.
func TestInstallSameReleaseWhileStreaming(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg, logs := loggedConfig(t, db)
	startRunner(t, cfg)
	waitStream(t, db)

	ctx := context.Background()
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := 1000 + w*100000 + i
				if _, err := db.Pool.Exec(ctx, `INSERT INTO items (id, owner) VALUES ($1, 'a')`, id); err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				n.Add(1)
				time.Sleep(2 * time.Millisecond)
			}
		}(w)
	}
	var maxInstall time.Duration
	script, err := synchro.SQL()
	require.NoError(t, err)
	for i := 0; i < 6; i++ {
		st := time.Now()
		switch i % 3 {
		case 0:
			// goose applies this release's last migration again (its function files
			// and the fence refresh) and records it while the runner streams.
			mustExec(t, db, fmt.Sprintf(`DELETE FROM synchro.goose_version WHERE version_id = %d`, synchro.PackVersion()))
			require.NoError(t, synchro.Install(ctx, db.SQL))
		case 1:
			require.NoError(t, synchro.Install(ctx, db.SQL))
		case 2:
			_, err := db.Pool.Exec(ctx, script)
			require.NoError(t, err)
		}
		maxInstall = max(maxInstall, time.Since(st))
	}
	close(stop)
	wg.Wait()
	total := int(n.Load())
	st := time.Now()
	waitEffects(t, db, total+0)
	t.Logf("inserted %d, longest install %s, drained in %s", total, maxInstall, time.Since(st))
	require.Empty(t, quarantines(t, db))
	require.Empty(t, logs.lines("runner_release"))
	require.Empty(t, logs.lines("newer than this runner"))
	t.Log(len(logs.lines("level=WARN")), "warnings")
	for _, l := range logs.lines("level=WARN") {
		t.Log(l)
	}
}

// synchro.runner_pack as a session declares it: the pack's version and anything that
// reads as a number no older pass; anything else is refused (SYW02), never read as
// "no declaration". No declaration at all (psql, direct calls) is not checked.
func TestRunnerPackDeclarationEdges(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	ctx := context.Background()
	own := synchro.PackVersion()
	var v int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.runner_pack_version()`).Scan(&v))
	require.Equal(t, own, v)
	for _, c := range []struct {
		declared string
		refused  bool
	}{
		{fmt.Sprint(own), false}, {fmt.Sprintf("00%d", own), false}, {fmt.Sprint(own + 1), false}, {"", false},
		{fmt.Sprint(own - 1), true}, {"abc", true}, {"99999999999999999999", true}, {" " + fmt.Sprint(own), true},
		{"-1", true},
	} {
		// In a transaction of its own, rolled back: the session's tables and the
		// setting go with it.
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('synchro.runner_pack', $1, true)`, c.declared); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT synchro.runner_stage_open()`)
			if err == nil {
				err = errRollback
			}
			return err
		})
		if c.refused {
			pe := requireSQLState(t, err, "SYW02")
			if c.declared == "abc" || len(c.declared) > 18 {
				require.NotContains(t, pe.Message+pe.Detail, c.declared, "the message carries no declared value")
			}
		} else {
			require.ErrorIs(t, err, errRollback, "declared %q", c.declared)
		}
	}
}

var errRollback = errors.New("rolled back on purpose")

// A deploy that migrates the pack past a runner while the runner serves a stream reset,
// and changes a reset function it calls: the reset must wait for the matching release,
// as a materialization does, not be failed for good.
func TestResetOlderThanThePack(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg, logs := loggedConfig(t, db)
	startRunner(t, cfg)
	waitStream(t, db)
	ctx := context.Background()

	// An xid-holding transaction: the candidate slot waits for it, after the step's
	// pack check.
	release := holdXid(t, db)

	op := newOperator(t, db)
	id := op.begin(t, "pack newer while resetting")
	_, _ = db.Pool.Exec(ctx, `INSERT INTO items (id, owner) VALUES (77, 'a')`)
	restore := migrateWhileSlotWaits(t, db, logs, release, "runner_reset_baseline(uuid, text, pg_lsn)")
	eventually(t, 20*time.Second, "the reset's failure to be taken for the release mismatch", func() bool {
		return len(logs.lines("a reset failure with SQLSTATE")) >= 1
	}, func() { t.Log(logs.String()) })
	s := op.status(t, id)
	t.Logf("reset phase %s detail %v", s.Phase, s.Detail)
	for _, l := range logs.lines("reset") {
		t.Log(l)
	}
	require.NotEqual(t, "failed", s.Phase, "a release mismatch failed the reset for good")
	// The matching release in place: the reset goes on.
	restore()
	op.waitPhase(t, id, "ready")
}

// A deploy that migrates the pack past a runner while its first start copies the
// baseline (after the step's own pack check), and changes the baseline's function: the
// runner waits for the matching release instead of stopping as in a fatal state.
func TestRunnerBaselineOlderThanThePack(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	// An xid-holding transaction: the first start's slot creation waits for it, after
	// the step's pack check.
	release := holdXid(t, db)
	cfg, logs := loggedConfig(t, db)
	rr := startRunner(t, cfg)
	restore := migrateWhileSlotWaits(t, db, logs, release, "runner_baseline(text, text, pg_lsn)")

	eventually(t, 20*time.Second, "the baseline's failure to be taken for the release mismatch", func() bool {
		return len(logs.lines("a baseline failure with SQLSTATE")) >= 1
	}, func() { t.Log(logs.String()) })
	select {
	case err := <-rr.done:
		rr.stopped, rr.err = true, err
		t.Fatalf("the runner stopped on a pack newer than itself: %v", err)
	default:
	}
	// The matching release in place: the first start completes.
	restore()
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	waitEffects(t, db, 1)
}

// migrateWhileSlotWaits waits until a replication slot's creation in this database
// waits for the transaction release ends (after the step's own pack check), then does
// what a deploy of a later release does: records a newer migration and takes the
// function fn (a signature in schema synchro) away under its name; then it lets the
// slot's creation go on. restore puts the pack back at the runner's release.
func migrateWhileSlotWaits(t *testing.T, db *testdb.DB, logs *syncLog, release func(), fn string) (restore func()) {
	t.Helper()
	// Filtered to this database: a parallel test's slot creation is not this one's.
	eventually(t, 20*time.Second, "a slot's creation to wait", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid()
			AND datname = current_database() AND query ILIKE 'CREATE_REPLICATION_SLOT%'`) >= 1
	}, func() { t.Log(logs.String()) })
	name, args, _ := strings.Cut(fn, "(")
	newer := synchro.PackVersion() + 1
	mustExec(t, db, fmt.Sprintf(`INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (%d, true);
		ALTER FUNCTION synchro.%s(%s RENAME TO %s_gone`, newer, name, args, name))
	release()
	return func() {
		mustExec(t, db, fmt.Sprintf(`DELETE FROM synchro.goose_version WHERE version_id = %d;
			ALTER FUNCTION synchro.%s_gone(%s RENAME TO %s`, newer, name, args, name))
	}
}

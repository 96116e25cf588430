package tests

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Killing `synchro run` (SIGKILL) in each phase of a stream reset, then starting it
// again: it resumes from the same permanent candidate slot and boundary, or discards
// the stage and starts a new candidate; it never activates a missing slot.

var (
	synchroBinOnce sync.Once
	synchroBin     string
	synchroBinErr  error
)

// buildSynchroOnce builds cmd/synchro once per test binary.
func buildSynchroOnce(t *testing.T) string {
	t.Helper()
	synchroBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "synchro-bin-")
		if err != nil {
			synchroBinErr = err
			return
		}
		synchroBin = filepath.Join(dir, "synchro")
		out, err := exec.Command("go", "build", "-o", synchroBin, "github.com/synchro/synchro/cmd/synchro").CombinedOutput()
		if err != nil {
			synchroBinErr = err
			synchroBin = string(out)
		}
	})
	require.NoError(t, synchroBinErr, synchroBin)
	return synchroBin
}

// runProc is a `synchro run` subprocess.
type runProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	logs []string
}

func startRunProc(t *testing.T, db *testdb.DB) *runProc {
	t.Helper()
	bin := buildSynchroOnce(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "run", "--slot", runnerSlot(db), "--listen", addr,
		"--heartbeat-interval", "250ms", "--standby-interval", "1s", "--backoff-max", "300ms")
	cmd.Env = append(os.Environ(), "SYNCHRO_DATABASE_URL="+db.URL)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &runProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs = append(p.logs, sc.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(t, db)
		if t.Failed() {
			p.mu.Lock()
			t.Log("synchro run:\n" + strings.Join(p.logs, "\n"))
			p.mu.Unlock()
		}
	})
	return p
}

// kill SIGKILLs the process and ends the server sessions it left behind (a killed
// client's backends stay until the server notices; the test does not wait for TCP).
func (p *runProc) kill(t *testing.T, db *testdb.DB) {
	t.Helper()
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	mustExec(t, db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'synchro-runner%'`)
	waitRunnerGone(t, db)
}

// waitRunnerWaitsOnLock waits until a runner session waits for a heavyweight lock.
func waitRunnerWaitsOnLock(t *testing.T, db *testdb.DB, app string) {
	t.Helper()
	eventually(t, 60*time.Second, app+" waiting on a lock", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1 AND wait_event_type = 'Lock'`, app) > 0
	})
}

// Not parallel: holding a transaction with an xid (to keep the runner in staging)
// stalls every slot creation in the cluster, so it runs before the parallel tests start.
func TestResetKilledInEachPhase(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("needs the private cluster")
	}
	db := testdb.New(t)
	mustExec(t, db, syncSchema)
	ctx := context.Background()
	run := startRunProc(t, db)
	waitStream(t, db)
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1');
		INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'one');
		INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	truncatePoison(t, db)
	op := newOperator(t, db)

	// requested: the reset is requested while no runner runs.
	run.kill(t, db)
	id := op.begin(t, "truncate")
	require.Equal(t, "requested", op.status(t, id).Phase)

	// staging: creating the candidate slot waits for a transaction that holds an xid.
	blocker, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = blocker.Exec(ctx, `SELECT pg_current_xact_id()`)
	require.NoError(t, err)
	run = startRunProc(t, db)
	s := op.waitPhase(t, id, "staging")
	require.NotNil(t, s.CandidateSlot)
	first := *s.CandidateSlot
	waitRunnerWaitsOnLock(t, db, "synchro-runner-replication")
	run.kill(t, db)
	require.NoError(t, blocker.Rollback(ctx))
	// Its exported snapshot died with the process: the next start discards it.

	// staging, rows staged: indexing them waits for a lock on the live progress table
	// (taken without an xid: slot creation does not wait for it).
	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = held.Exec(ctx, `LOCK TABLE synchro.progress IN ACCESS SHARE MODE`)
	require.NoError(t, err)
	run = startRunProc(t, db)
	eventually(t, 60*time.Second, "baseline rows staged", func() bool {
		s = op.status(t, id)
		return s.Phase == "staging" && s.ConsistentPoint != nil
	})
	second := *s.CandidateSlot
	require.NotEqual(t, first, second, "a death before the rows were staged discards the candidate")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, first))
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	run.kill(t, db)

	// catching_up: the coordinator's marker waits for a lock on the push fences (no xid).
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	require.NoError(t, held.Rollback(ctx))
	run = startRunProc(t, db)
	s = op.waitPhase(t, id, "catching_up")
	require.Equal(t, second, *s.CandidateSlot, "indexing resumes with the same candidate")
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (10, 1, 'o1', 'during catch-up')`)
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	run.kill(t, db)
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (11, 1, 'o1', 'while dead')`)
	run = startRunProc(t, db)
	waitRunnerWaitsOnLock(t, db, "synchro-runner-reset")
	s = op.status(t, id)
	require.Equal(t, "catching_up", s.Phase)
	require.Equal(t, second, *s.CandidateSlot, "catch-up resumes from the same permanent slot")
	require.NoError(t, lock.Rollback(ctx))
	s = op.waitPhase(t, id, "ready")
	require.Equal(t, second, *s.CandidateSlot)
	barrier := *s.ActivationBarrier

	// ready: a death changes nothing; the restarted runner waits for the operator.
	run.kill(t, db)
	run = startRunProc(t, db)
	eventually(t, 20*time.Second, "the restarted runner waiting for the operator", func() bool {
		var state string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT state FROM synchro.runner`).Scan(&state))
		return state == "resetting"
	})
	s = op.status(t, id)
	require.Equal(t, "ready", s.Phase)
	require.Equal(t, barrier, *s.ActivationBarrier)

	// activated while the runner is dead: the next start cleans up and streams the
	// candidate slot the durable pointer names.
	run.kill(t, db)
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (12, 1, 'o1', 'after activation')`)
	run = startRunProc(t, db)
	eventually(t, 30*time.Second, "ready on the new stream", func() bool {
		var ok bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ok))
		return ok
	})
	write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (13, 1, 'o1', 'sentinel')`)
	for _, scope := range []string{"owner:o1", "user:u1"} {
		r, _, _ := onePageRebuild(t, db, "k", scope)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, second))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE attempt = 2 AND cleaned_at IS NOT NULL`))
	run.kill(t, db)
}

package tests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Stream reset (CONTRACT.md "Operator"; ADR 001 "Causally Bound Projection Baseline
// And Stream Reset"), with the runner running in-process and the operator's calls on an
// ordinary SQL connection as synchro_operator, as psql would make them.

// operator is a connection as synchro_operator.
type operator struct {
	conn *pgx.Conn
	db   *testdb.DB // the test's superuser pool, for diagnostics
}

func newOperator(t *testing.T, db *testdb.DB) *operator {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `SET ROLE synchro_operator`)
	require.NoError(t, err)
	return &operator{conn: conn, db: db}
}

func (o *operator) begin(t *testing.T, reason string) string {
	t.Helper()
	var id string
	require.NoError(t, o.conn.QueryRow(context.Background(), `SELECT synchro.begin_reset($1)::text`, reason).Scan(&id))
	return id
}

type resetStatus struct {
	ResetID           string  `json:"reset_id"`
	Phase             string  `json:"phase"`
	CandidateSlot     *string `json:"candidate_slot"`
	ConsistentPoint   *string `json:"consistent_point"`
	SnapshotBoundary  *string `json:"snapshot_boundary"`
	ActivationBarrier *string `json:"activation_barrier"`
	Detail            *string `json:"detail"`
}

func (o *operator) status(t *testing.T, id string) resetStatus {
	t.Helper()
	var raw string
	require.NoError(t, o.conn.QueryRow(context.Background(), `SELECT synchro.reset_status($1)::text`, id).Scan(&raw))
	var s resetStatus
	require.NoError(t, json.Unmarshal([]byte(raw), &s))
	return s
}

func (o *operator) exec(sql string, args ...any) error {
	_, err := o.conn.Exec(context.Background(), sql, args...)
	return err
}

// waitPhase waits until the reset reaches phase (failing fast on failed).
func (o *operator) waitPhase(t *testing.T, id, phase string) resetStatus {
	t.Helper()
	var s resetStatus
	eventually(t, 180*time.Second, "reset phase "+phase, func() bool {
		s = o.status(t, id)
		if s.Phase == "failed" && phase != "failed" {
			t.Fatalf("reset failed: %v", s.Detail)
		}
		return s.Phase == phase
	}, func() {
		// What a stuck reset waits for: the candidate slot's exported snapshot waits for
		// every xid-holding transaction of the cluster, the runner's log says the rest.
		logClusterActivity(t, o.db, "reset diagnostics")
		var st string
		if o.db.Pool.QueryRow(context.Background(), `SELECT synchro.reset_status($1)::text`, id).Scan(&st) == nil {
			t.Logf("reset diagnostics: status %s", st)
		}
	})
	return s
}

// truncatePoison writes a TRUNCATE of notes that bypasses the statement guard and
// waits for the runner to quarantine it.
func truncatePoison(t *testing.T, db *testdb.DB) {
	t.Helper()
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE notes; COMMIT;`)
	eventually(t, 10*time.Second, "the truncate quarantined", func() bool {
		q := quarantines(t, db)
		return len(q) == 1 && q[0].Class == "truncate" && !q[0].Resolved
	})
}

// requireSQLStateOf runs a pull or rebuild and requires the SQLSTATE.
func pullCode(t *testing.T, db *testdb.DB, clientID, scope, cursor string) {
	t.Helper()
	_, err := pullRaw(db, clientID, scope, cursor, 100)
	requireSQLState(t, err, "SY409")
}

// onePageRebuild rebuilds scope in one page: position P and the rows come from one
// statement, so no row after P is in the page.
func onePageRebuild(t *testing.T, db *testdb.DB, clientID, scope string) (replica, []rebuildRow, string) {
	t.Helper()
	p := mustRebuildPage(t, db, clientID, scope, "", 10000)
	require.False(t, p.HasMore)
	r := replica{}
	r.applyRebuild(t, p.Rows)
	require.Equal(t, chainChecksum(p.Rows), p.Checksum)
	return r, p.Rows, p.Cursor
}

// TestResetRecoversTruncatePoison: a TRUNCATE in the WAL blocks the stream for good;
// an operator reset recovers it. Writes committed while the reset stages and catches
// up all arrive exactly once; old cursors and rebuild sessions get SY409; clients
// rebuild to exactly the live state; the old slot and projections are retired.
func TestResetRecoversTruncatePoison(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		// Not parallel: a reset creates a slot with an exported snapshot, which waits for
		// every transaction of the cluster that holds an xid (other tests hold some for
		// long), so it runs in the sequential phase, alone.
		e := newSyncEnv(t, "")
		db := e.db
		ctx := context.Background()
		write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1'), (2, 2, 'u2');
			INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'one'), (2, 2, 'o1', 'two'), (3, 1, 'o2', 'three');
			INSERT INTO notes VALUES ('n1', 'o1', 'first'), ('n2', 'o2', 'second')`)
		var oldSlot string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT slot_name FROM synchro.stream_generation WHERE state = 'active'`).Scan(&oldSlot))

		_, oldCursor := startScope(t, db, "c1", "owner:o1")
		midSession := mustRebuildPage(t, db, "c1", "user:u1", "", 1) // a rebuild left in the middle
		require.True(t, midSession.HasMore)

		truncatePoison(t, db)
		// After the poison: nothing of these materializes on the old stream.
		mustExec(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'after the truncate'); UPDATE tasks SET title = 'uno' WHERE id = 1`)

		op := newOperator(t, db)
		id := op.begin(t, "TRUNCATE of notes reached the WAL")
		// One reset at a time.
		err := op.exec(`SELECT synchro.begin_reset('again')`)
		requireSQLState(t, err, "SY400")
		// Out-of-phase activation names the phase.
		err = op.exec(`SELECT synchro.activate_reset($1)`, id)
		pe := requireSQLState(t, err, "SY400")
		require.Contains(t, pe.Message, "phase")

		// Writes while the reset stages and catches up, each committed exactly once.
		var next atomic.Int64
		next.Store(1000)
		var mu sync.Mutex
		var written []int64
		stop := make(chan struct{})
		var writers sync.WaitGroup
		writers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := next.Add(1)
				if n > 1400 {
					return // enough to span staging and catch-up; bounded for the shared machine
				}
				if _, err := db.Pool.Exec(ctx, `INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'o1', 'w')`, n); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				mu.Lock()
				written = append(written, n)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		})
		s := op.waitPhase(t, id, "ready")
		close(stop)
		writers.Wait()
		require.NotNil(t, s.CandidateSlot)
		require.NotNil(t, s.ConsistentPoint)
		require.NotNil(t, s.SnapshotBoundary)
		require.NotNil(t, s.ActivationBarrier)
		require.Greater(t, lsnOf(t, s.ActivationBarrier), lsnOf(t, s.ConsistentPoint))
		// Until activation the old stream is untouched and still blocked.
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = 'n3'`))
		_, err = pullRaw(db, "c1", "owner:o1", oldCursor, 100)
		require.NoError(t, err, "before activation the old generation still serves")

		require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
		require.Equal(t, "activated", op.status(t, id).Phase)
		err = op.exec(`SELECT synchro.activate_reset($1)`, id)
		requireSQLState(t, err, "SY400")
		err = op.exec(`SELECT synchro.abort_reset($1)`, id)
		requireSQLState(t, err, "SY400")

		// Every old cursor and rebuild session is stale.
		pullCode(t, db, "c1", "owner:o1", oldCursor)
		_, err = rebuildRaw(db, "c1", "user:u1", midSession.Session, 1)
		requireSQLState(t, err, "SY409")

		// A client rebuilds right away (the runner may not have streamed the new slot
		// yet), then pulls once everything written is materialized.
		rep, rows, cursor := onePageRebuild(t, db, "c2", "owner:o1")
		write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (999, 2, 'o1', 'after activation')`)
		changes, _ := pullAll(t, db, "c2", "owner:o1", cursor, 1000)
		rep.apply(t, changes)
		requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:o1"), rep, "owner:o1 after the reset")
		// Exactly once: every written row is in the rebuild or in the pull, never both.
		seen := map[string]int{}
		for _, r := range rows {
			seen[r.key()]++
		}
		for _, c := range changes {
			seen[c.key()]++
		}
		for _, n := range append(written, 999) {
			require.Equal(t, 1, seen[fmt.Sprintf("tasks/%d", n)], "task %d delivered once", n)
		}
		require.Greater(t, len(written), 0)
		// The truncated notes are gone, the note written after the truncate is there.
		require.Equal(t, 0, seen["notes/n1"])
		require.Equal(t, 1, seen["notes/n3"])
		for _, scope := range []string{"user:u1", "user:u2", "owner:o2"} {
			r, _, _ := onePageRebuild(t, db, "c3", scope)
			requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
		}

		// Controlled cleanup: the old slot and the retired projections go; readiness is back.
		eventually(t, 20*time.Second, "cleanup of the old slot", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, oldSlot) == 0 &&
				countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE cleaned_at IS NOT NULL`) == 1
		})
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname IN ('synchro_reset', 'synchro_retired')`))
		eventually(t, 20*time.Second, "ready", func() bool {
			var ok bool
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.ready()`).Scan(&ok))
			return ok
		})
	})
}

// asPgError is err's PostgreSQL error, or nil.
func asPgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// rebuildErr calls rebuild's first page and returns its error.
func rebuildErr(db *testdb.DB, clientID, scope string) error {
	_, err := rebuildRaw(db, clientID, scope, "", 1000)
	return err
}

// pushTask pushes the insert of task id (owner o1) for clientID and returns its fence.
func pushTask(t *testing.T, db *testdb.DB, clientID string, id int) string {
	t.Helper()
	raw, err := pushRawOn(context.Background(), db.Pool, clientID,
		pushJSON(t, pushIns(pushID(), "tasks", id, pm{"owner": "o1", "project_id": 1, "title": "pushed"})))
	require.NoError(t, err)
	require.Contains(t, raw, `"accepted"`)
	var fence string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT fence_id::text FROM synchro.write_fence WHERE client_id = $1`, clientID).Scan(&fence))
	return fence
}

// TestResetPushFenceCoverage: a push accepted before the snapshot is covered by its
// reset_baseline record once (and only once) the reset activates; a push accepted
// after the snapshot waits for candidate-slot materialization.
func TestResetPushFenceCoverage(t *testing.T) {
	// Not parallel: a reset creates a slot with an exported snapshot, which waits for
	// every transaction of the cluster that holds an xid (other tests hold some for
	// long), so it runs in the sequential phase, alone.
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	truncatePoison(t, db)

	// Accepted before the snapshot; the blocked stream never materializes it.
	before := pushTask(t, db, "before", 100)
	requireSQLState(t, rebuildErr(db, "before", "owner:o1"), "SY503")

	op := newOperator(t, db)
	id := op.begin(t, "push coverage")
	op.waitPhase(t, id, "ready")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.reset_baseline WHERE reset_id = $1 AND fence_id = $2`, id, before))
	// Staged coverage does not clear the gate.
	requireSQLState(t, rebuildErr(db, "before", "owner:o1"), "SY503")

	// Accepted after the snapshot (and the barrier), with no runner to materialize it.
	e.stopRunner(t)
	after := pushTask(t, db, "after", 101)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.reset_baseline WHERE fence_id = $1`, after))

	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	rows, last := fullRebuild(t, db, "before", "owner:o1", 1000)
	keys := rowKeys(rows)
	require.Contains(t, keys, "tasks/100", "the baseline holds the pushed row")
	require.NotContains(t, keys, "tasks/101")
	require.NotContains(t, keys, "notes/n1", "truncated")
	requireSQLState(t, rebuildErr(db, "after", "owner:o1"), "SY503")

	e.startRunner(t)
	eventually(t, 20*time.Second, "the later push materialized from the candidate slot", func() bool {
		return rebuildErr(db, "after", "owner:o1") == nil
	})
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE fence_id = $1 AND coverage = 'wal'`, after))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE fence_id = $1 AND coverage = 'baseline'`, before))
	changes, _ := pullAll(t, db, "before", "owner:o1", last.Cursor, 1000)
	require.Equal(t, []string{"upsert:tasks/101"}, opsOf(changes))
}

// TestResetGenerationStartCursorsSurviveCompaction: the catch-up's transactions (the
// marker's at least) are in the new stream generation's ledger below its start, and
// compaction may set the retention horizon at one of them. A cursor or rebuild session
// at the generation's start, which a rebuild hands out until a transaction after the
// barrier is materialized, lost nothing then: the catch-up's effects were never
// exposed. They were SY409 anyway, and a rebuild handed out the same position again,
// so a client looped on SY409 until the next write (LESSONS.md, "Resets and caches").
func TestResetGenerationStartCursorsSurviveCompaction(t *testing.T) {
	// Not parallel: a reset's exported snapshot waits for every xid-holding transaction
	// of the cluster (TestResetPushFenceCoverage says more).
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first'), ('n2', 'o1', 'second')`)
	op := newOperator(t, db)
	id := op.begin(t, "generation start cursors")
	op.waitPhase(t, id, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))

	// Nothing after the barrier is materialized: the rebuild's position is the
	// generation's start.
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.progress WHERE materialized_commit_lsn IS NULL`))
	rep, cur := startScope(t, db, "gs", "owner:o1")
	require.Equal(t, []string{"notes/n1", "notes/n2"}, keysOf(rep))
	session := mustRebuildPage(t, db, "gs", "owner:o1", "", 1)
	require.True(t, session.HasMore)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.progress WHERE materialized_commit_lsn IS NULL`),
		"still at the generation's start")

	var res map[string]any
	require.NoError(t, callJSON(db, &res, `SELECT synchro.compact('0 seconds')::text`))
	// The horizon is one of the catch-up's transactions, below the generation's start
	// (else this test proves nothing).
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.retention r JOIN synchro.progress p USING (stream_generation)
		WHERE r.horizon_commit_lsn < p.generation_start_lsn`), "%v", res)

	_, err := pullRaw(db, "gs", "owner:o1", cur, 10)
	require.NoError(t, err, "a generation-start cursor after compaction of the catch-up")
	_, err = rebuildRaw(db, "gs", "owner:o1", session.Session, 10)
	require.NoError(t, err, "a generation-start rebuild session after compaction of the catch-up")
	write(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'third')`)
	changes, _ := pullAll(t, db, "gs", "owner:o1", cur, 10)
	require.Equal(t, []string{"upsert:notes/n3"}, opsOf(changes))
}

// TestResetAbort: a reset blocks a healthy stream until it is aborted; abort discards
// the stage and the candidate slot, and the old stream resumes as it was (its cursors
// still valid).
func TestResetAbort(t *testing.T) {
	// Not parallel: a reset creates a slot with an exported snapshot, which waits for
	// every transaction of the cluster that holds an xid (other tests hold some for
	// long), so it runs in the sequential phase, alone.
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
	_, cursor := startScope(t, db, "c1", "owner:o1")
	var gen int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT stream_generation FROM synchro.progress`).Scan(&gen))

	op := newOperator(t, db)
	id := op.begin(t, "changed my mind")
	s := op.waitPhase(t, id, "ready")
	require.NotNil(t, s.CandidateSlot)
	// Committed while the reset is open: the old stream is blocked.
	xid := commitXid(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'while the reset is open')`)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE stream_generation = $1 AND xid % 4294967296 = $2`, gen, xid))

	// What activates is what was verified: a staged state changed after verification
	// is refused.
	mustExec(t, db, `DELETE FROM synchro_reset.membership WHERE ctid = (SELECT min(ctid) FROM synchro_reset.membership)`)
	pe := requireSQLState(t, op.exec(`SELECT synchro.activate_reset($1)`, id), "SY400")
	require.Contains(t, pe.Message, "verified")

	// Never activates a missing slot: with the candidate gone, activation refuses.
	e.stopRunner(t)
	mustExec(t, db, `SELECT pg_drop_replication_slot($1)`, *s.CandidateSlot)
	pe = requireSQLState(t, op.exec(`SELECT synchro.activate_reset($1)`, id), "SY400")
	require.Contains(t, pe.Message, "candidate slot")
	require.Equal(t, "ready", op.status(t, id).Phase)
	e.startRunner(t)

	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	require.Equal(t, "aborted", op.status(t, id).Phase)
	requireSQLState(t, op.exec(`SELECT synchro.abort_reset($1)`, id), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.activate_reset($1)`, id), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.activate_reset('00000000-0000-0000-0000-000000000000')`), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.reset_status('00000000-0000-0000-0000-000000000000')`), "SY400")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM pg_tables WHERE schemaname = 'synchro_reset'`))

	waitXid(t, db, xid)
	changes, _ := pullAll(t, db, "c1", "owner:o1", cursor, 1000)
	require.Equal(t, []string{"upsert:notes/n2"}, opsOf(changes))
	eventually(t, 20*time.Second, "the candidate slot dropped", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, *s.CandidateSlot) == 0 &&
			countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE cleaned_at IS NOT NULL`) == 1
	})
	var stillGen int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT stream_generation FROM synchro.progress`).Scan(&stillGen))
	require.Equal(t, gen, stillGen)
	// A later reset may begin.
	op.begin(t, "second try")
}

// TestResetCatchUpFailure: a source transaction the catch-up cannot materialize (a
// TRUNCATE after the snapshot) fails the reset; the old stream stays blocked and no
// active state changes; after abort a new reset (a new snapshot, after that TRUNCATE)
// recovers.
func TestResetCatchUpFailure(t *testing.T) {
	// Not parallel: a reset creates a slot with an exported snapshot, which waits for
	// every transaction of the cluster that holds an xid (other tests hold some for
	// long), so it runs in the sequential phase, alone.
	e := newSyncEnv(t, "")
	db := e.db
	ctx := context.Background()
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'first'); INSERT INTO tasks (id, owner) VALUES (1, 'o1')`)
	truncatePoison(t, db)
	_, err := db.Pool.Exec(ctx, `INSERT INTO notes VALUES ('n2', 'o1', 'second')`)
	require.NoError(t, err)
	var gen int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT stream_generation FROM synchro.progress`).Scan(&gen))

	// The marker waits for this lock, so the TRUNCATE below commits before the barrier.
	lock, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	op := newOperator(t, db)
	id := op.begin(t, "first try")
	op.waitPhase(t, id, "catching_up")
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE notes; COMMIT;`)
	require.NoError(t, lock.Rollback(ctx))
	s := op.waitPhase(t, id, "failed")
	require.NotNil(t, s.Detail)
	require.Equal(t, "truncate", *s.Detail)

	// Nothing active changed; the old stream is still blocked.
	var stillGen int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT stream_generation FROM synchro.progress`).Scan(&stillGen))
	require.Equal(t, gen, stillGen)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.quarantine WHERE resolved_at IS NULL`))
	requireSQLState(t, op.exec(`SELECT synchro.activate_reset($1)`, id), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.begin_reset('while one failed')`), "SY400")

	require.NoError(t, op.exec(`SELECT synchro.abort_reset($1)`, id))
	id2 := op.begin(t, "second try")
	op.waitPhase(t, id2, "ready")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id2))
	for _, scope := range []string{"owner:o1"} {
		write(t, db, `INSERT INTO notes VALUES ('n9', 'o1', 'sentinel')`)
		r, _, _ := onePageRebuild(t, db, "c", scope)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
		require.NotContains(t, keysOf(r), "notes/n2")
	}
}

// TestResetLargeBaseline: a baseline larger than one indexing and verification chunk
// (the staged tables hold the live names one short chunk at a time) while clients keep
// reading the old generation: no reader fails until activation makes its cursor stale,
// and every scope rebuilds to exactly the live state afterwards.
//
// Not parallel: its baseline transactions hold an xid for seconds, and every slot
// creation in the cluster (each test's first start) waits for them.
func TestResetLargeBaseline(t *testing.T) {
	// The rows are there before the first start: its baseline projects them.
	e := newSyncEnv(t, `INSERT INTO project_members SELECT g, g % 7, 'u' || (g % 5) FROM generate_series(1, 50) g;
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, CASE WHEN g % 20 = 0 THEN g % 7 END, 'o' || (g % 3), 't' || g FROM generate_series(1, 7000) g;
		INSERT INTO notes SELECT 'n' || g, 'o' || (g % 3), 'b' FROM generate_series(1, 500) g;`)
	db := e.db
	_, cursor := startScope(t, db, "reader", "owner:o1")
	truncatePoison(t, db)

	// A reader on the old generation while the reset stages, indexes and catches up.
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	readers.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := pullRaw(db, "reader", "owner:o1", cursor, 100); err != nil {
				var code string
				if pe := asPgError(err); pe != nil {
					code = pe.Code
				}
				if code != "SY409" {
					t.Errorf("reader: %v", err)
				}
				return
			}
			if _, err := rebuildRaw(db, "reader", "user:u1", "", 100); err != nil {
				if pe := asPgError(err); pe == nil || pe.Code != "SY409" {
					t.Errorf("reader rebuild: %v", err)
				}
				return
			}
			reads.Add(1)
		}
	})
	op := newOperator(t, db)
	id := op.begin(t, "large baseline")
	mustExec(t, db, `UPDATE tasks SET owner = 'o1' WHERE id BETWEEN 1 AND 100; DELETE FROM tasks WHERE id BETWEEN 200 AND 210;
		INSERT INTO project_members VALUES (51, 1, 'u1')`)
	op.waitPhase(t, id, "ready")
	close(stop)
	readers.Wait()
	require.Greater(t, reads.Load(), int64(0))
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (20000, 1, 'o1', 'sentinel')`)
	for _, scope := range []string{"owner:o0", "owner:o1", "owner:o2", "user:u1", "user:u4"} {
		r, _, _ := onePageRebuild(t, db, "c", scope)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
	}
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.membership m
		WHERE NOT EXISTS (SELECT 1 FROM synchro.projection p WHERE p.relation_id = m.relation_id AND p.pk = m.pk)`))
}

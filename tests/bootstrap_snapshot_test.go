package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// The projection bootstrap under an exported snapshot (docs/bootstrap.md): the runner
// stages the rows under a slot's exported snapshot (consistent point C) while writers
// go on, and the main worker is the catch-up: a write committed before C is in the
// stage (and never in the event ledger), a write committed at or after C is
// materialized from the WAL after the merge, each exactly once.

// bootstrapLock is the advisory lock a stage takes first, right after the snapshot
// import (synchro.runner_bootstrap_stage): holding it holds the staging transaction
// open with its snapshot.
const bootstrapLock = `hashtextextended('synchro.bootstrap', (SELECT value::bigint FROM synchro.setting WHERE name = 'lock_seed'))`

// bootstrapPoint is the consistent point of the relation's last bootstrap.
func bootstrapPoint(t *testing.T, db *testdb.DB, tableID string) string {
	t.Helper()
	var cp string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT b.consistent_point::text FROM synchro.bootstrap b JOIN synchro.relation r USING (relation_id)
		 WHERE r.table_id = $1 ORDER BY b.generation DESC LIMIT 1`, tableID).Scan(&cp))
	return cp
}

// txnBefore reports whether the source transaction xid committed below LSN cp (so it is
// in the snapshot), from the runner's replay identity of it.
func txnBefore(t *testing.T, db *testdb.DB, xid int64, cp string) bool {
	t.Helper()
	var before bool
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT commit_lsn < $2::pg_lsn FROM synchro.txn WHERE xid % 4294967296 = $1`, xid, cp).Scan(&before))
	return before
}

// docEvents counts the event ledger's events of a docs row.
func docEvents(t *testing.T, db *testdb.DB, pk int) int {
	t.Helper()
	return countOf(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.relation r USING (relation_id)
		WHERE r.table_id = 'docs' AND e.pk = $1`, fmt.Sprint(pk))
}

// requireBootstrapDeath waits for p to die by SIGKILL at a staging point. Longer than
// requireFaultDeath: creating the slot waits for every transaction of the cluster that
// holds a transaction id, which under make test's parallel load can take more than 15 s.
func requireBootstrapDeath(t *testing.T, p *runproc.Proc, point fault.Point) {
	t.Helper()
	require.True(t, p.Wait(120*time.Second), "the runner did not die at %s", point)
	require.True(t, p.Killed(), "exit: %s\n%s", p.Exit(), p.Logs())
	require.Equal(t, point, p.FaultReached())
}

// bootstrapKilledAt registers a table filled with n rows (owner: a SQL expression
// of the row number i) on a stream served by a runner that dies by SIGKILL at
// point of the bootstrap the activation starts, and returns the dead runner.
func bootstrapKilledAt(t *testing.T, bin string, db *testdb.DB, n int, owner string, point fault.Point) *runproc.Proc {
	t.Helper()
	mustExec(t, db, fmt.Sprintf(`CREATE TABLE filled (id int8 PRIMARY KEY, owner text);
		INSERT INTO filled SELECT i, %s FROM generate_series(1, %d) i;`, owner, n))
	p := startProc(t, bin, db, fault.Spec{Point: point, N: 1}.String())
	waitStream(t, db)
	mustExec(t, db, `SELECT synchro.register_table('filled', 'filled');
		SELECT synchro.add_scope_rule('filled', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	requireBootstrapDeath(t, p, point)
	return p
}

// TestBootstrapSnapshotBoundary: a write held open across the slot's creation commits
// before the consistent point; a write committed while the staging transaction holds
// its snapshot open does not wait for it and commits after the point; a push accepted
// before the snapshot is covered by the stage (its client waits for the merge, SY503,
// then is served). Each arrives exactly once: in the stage or from the WAL, never both.
// Under both decoders: under wal2json the runner's restart once hung here, behind the
// held write, on its start-up option probe (TestRunnerWal2jsonRestartBesideHeldTransaction).
func TestBootstrapSnapshotBoundary(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
			INSERT INTO docs SELECT i, 't1', 'doc ' || i FROM generate_series(1, 2000) i;
			GRANT SELECT ON docs TO synchro_operator;`)
		db := e.db
		ctx := context.Background()

		// The activation and what follows it before any stage, with the runner stopped.
		e.stopRunner(t)
		op := newOperator(t, db)
		require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
		require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
		g := op.activate(t)
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`), "the activation copies nothing")
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_status WHERE phase = 'requested' AND table_id = 'docs'`))

		// Accepted before the snapshot.
		raw, err := pushRawOn(ctx, db.Pool, "pusher",
			pushJSON(t, pushIns(pushID(), "docs", 5001, pm{"team": "t1", "body": "pushed"})))
		require.NoError(t, err)
		require.Contains(t, raw, `"accepted"`)
		var fence string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT fence_id::text FROM synchro.write_fence WHERE client_id = 'pusher'`).Scan(&fence))

		// Held open across the slot's creation (which waits for it): before the point.
		held, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = held.Rollback(ctx) }()
		_, err = held.Exec(ctx, `INSERT INTO docs VALUES (5002, 't1', 'held')`)
		require.NoError(t, err)
		var heldXid int64
		require.NoError(t, held.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint % 4294967296`).Scan(&heldXid))

		// The staging transaction will wait on this lock with its snapshot imported.
		lock, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer lock.Release()
		_, err = lock.Exec(ctx, `SELECT pg_advisory_lock(`+bootstrapLock+`)`)
		require.NoError(t, err)
		locked := true
		defer func() {
			if locked {
				_, _ = lock.Exec(ctx, `SELECT pg_advisory_unlock(`+bootstrapLock+`)`)
			}
		}()

		e.startRunner(t)
		eventually(t, 120*time.Second, "the bootstrap slot being created", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_replication_slots
				WHERE slot_name LIKE 'synchro\_bootstrap\_%' AND database = current_database()`) == 1
		})
		require.NoError(t, held.Commit(ctx))
		eventually(t, 120*time.Second, "the staging transaction holding its snapshot", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database()`) == 1
		})

		// Writes while the snapshot is held open: they do not wait for the copy.
		afterXid := commitXid(t, db, `INSERT INTO docs VALUES (5003, 't1', 'after');
			UPDATE docs SET body = 'updated after' WHERE id = 7; DELETE FROM docs WHERE id = 8`)
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'staging'`),
			"the stage is still held open")
		requireSQLState(t, rebuildErr(db, "pusher", "team:t1"), "SY503")
		requireSQLState(t, rebuildErr(db, "b", "team:t1"), "SY503")

		_, err = lock.Exec(ctx, `SELECT pg_advisory_unlock(`+bootstrapLock+`)`)
		require.NoError(t, err)
		locked = false
		waitRegistry(t, db, g)
		waitXid(t, db, afterXid)

		cp := bootstrapPoint(t, db, "docs")
		require.True(t, txnBefore(t, db, heldXid, cp), "the held write committed before the consistent point")
		require.False(t, txnBefore(t, db, afterXid, cp), "the write during staging committed after it")
		// Before the point: in the stage, not in the ledger; after it: in the ledger once.
		require.Equal(t, 0, docEvents(t, db, 5001))
		require.Equal(t, 0, docEvents(t, db, 5002))
		require.Equal(t, 1, docEvents(t, db, 5003))
		require.Equal(t, 1, docEvents(t, db, 7))
		require.Equal(t, 1, docEvents(t, db, 8))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE fence_id = $1 AND coverage = 'baseline'`, fence))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_coverage WHERE fence_id = $1`, fence))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_status
			WHERE table_id = 'docs' AND phase = 'merged' AND attempt = 1 AND row_count = 2002 AND staged_rows = 0`))

		// The pusher is served; both clients rebuild to exactly the live state.
		for _, c := range []string{"pusher", "b"} {
			rows, last := fullRebuild(t, db, c, "team:t1", 1000)
			rep := replica{}
			rep.applyRebuild(t, rows)
			requireReplica(t, liveScope(t, db, liveDocsSQL, "team:t1"), rep, "team:t1 for "+c)
			write(t, db, `INSERT INTO docs VALUES ($1, 't1', 'streamed')`, 6000+len(c))
			changes, _ := pullAll(t, db, c, "team:t1", last.Cursor, 100)
			require.Equal(t, []string{fmt.Sprintf("upsert:docs/%d", 6000+len(c))}, opsOf(changes))
		}
		requireNoQuarantine(t, db)
	})
}

// TestBootstrapRunnerKilled: `synchro run` killed (SIGKILL) while staging loses the
// exported snapshot with its connection and the stage with its transaction: the next
// start takes a new snapshot (attempt 2). Killed after the stage committed, before the
// main worker merged it: the next start merges that stage. Writes between the deaths
// arrive exactly once, and every row is projected once. Under both decoders.
func TestBootstrapRunnerKilled(t *testing.T) {
	bin := runproc.BuildT(t, runproc.FaultTag)
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		p := bootstrapKilledAt(t, bin, db, 3000, `'o' || (i % 3)`, fault.BootstrapStaging)
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`), "the stage rolled back")
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'staging' AND attempt = 1`))
		eventually(t, 60*time.Second, "the temporary slot gone with its connection", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'synchro\_bootstrap\_%' AND database = current_database()`) == 0
		})
		mustExec(t, db, `INSERT INTO filled VALUES (3001, 'o1')`)

		waitRunnerGone(t, db)
		p = startProc(t, bin, db, fault.Spec{Point: fault.BootstrapStaged, N: 1}.String())
		requireBootstrapDeath(t, p, fault.BootstrapStaged)
		require.Equal(t, 3001, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`), "staged, with the write between the deaths")
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'staged' AND attempt = 2 AND merged_at IS NULL`))
		mustExec(t, db, `INSERT INTO filled VALUES (3002, 'o1')`)

		waitRunnerGone(t, db)
		p = startProc(t, bin, db, "")
		waitBootstraps(t, db)
		eventually(t, 60*time.Second, "the write after the stage materialized", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.relation r USING (relation_id)
				WHERE r.table_id = 'filled' AND e.pk = '3002'`) == 1
		})
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'filled' AND e.pk = '3001'`), "in the stage, not in the ledger")
		require.Equal(t, 3002, countOf(t, db, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'filled'`))
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'merged' AND attempt = 2`))
		rows, _ := fullRebuild(t, db, "a", "owner:o1", 2000)
		rep := replica{}
		rep.applyRebuild(t, rows)
		require.Len(t, rep, 1002)
		requireNoQuarantine(t, db)
		require.NoError(t, p.Stop(10*time.Second))
	})
}

// TestBootstrapStageVerified: a stage whose rows no longer match the count and digest
// taken when they were staged is never merged: the transaction at the consistent point
// is quarantined as bootstrap_incomplete (SYP08) and the stream blocks.
func TestBootstrapStageVerified(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t, runproc.FaultTag)
	db := runnerSetup(t)
	p := bootstrapKilledAt(t, bin, db, 100, `'o1'`, fault.BootstrapStaged)
	// Same count, another version: only the digest tells.
	mustExec(t, db, `UPDATE synchro.bootstrap_row SET version = 'forged' WHERE pk = '7'`)
	mustExec(t, db, `INSERT INTO filled VALUES (101, 'o1')`)
	waitRunnerGone(t, db)
	p = startProc(t, bin, db, "")
	eventually(t, 60*time.Second, "the incomplete stage quarantined", func() bool {
		q := quarantines(t, db)
		return len(q) == 1 && q[0].Class == "bootstrap_incomplete"
	})
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE version = 'forged'`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE merged_at IS NULL`))
	require.NoError(t, p.Stop(10*time.Second))
}

// TestBootstrapSubsumedByReset: a stream reset activated while a bootstrap is staged
// but not merged subsumes it: its baseline holds the rows, the stage goes (phase
// subsumed), and clients rebuild to the live table.
func TestBootstrapSubsumedByReset(t *testing.T) {
	// Not parallel: a reset creates a slot with an exported snapshot, which waits for
	// every transaction of the cluster that holds an xid.
	bin := runproc.BuildT(t, runproc.FaultTag)
	db := runnerSetup(t)
	p := bootstrapKilledAt(t, bin, db, 500, `'o' || (i % 2)`, fault.BootstrapStaged)
	require.Equal(t, 500, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`))
	waitRunnerGone(t, db)

	op := newOperator(t, db)
	id := op.begin(t, "subsume a staged bootstrap")
	p = startProc(t, bin, db, "")
	op.waitPhase(t, id, "ready")
	require.Equal(t, 500, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`), "the old stream is blocked: not merged")
	require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_row`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_status WHERE phase = 'subsumed' AND table_id = 'filled'`))

	mustExec(t, db, `INSERT INTO filled VALUES (501, 'o1')`)
	eventually(t, 60*time.Second, "streaming on the new generation", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE pk = '501'`) == 1
	})
	rows, _ := fullRebuild(t, db, "a", "owner:o1", 1000)
	rep := replica{}
	rep.applyRebuild(t, rows)
	require.Len(t, rep, 251)
	requireNoQuarantine(t, db)
	require.NoError(t, p.Stop(10*time.Second))
}

// TestBootstrapConsumerGroup: a consumer group gets no change records for the rows a
// projection bootstrap staged (they are no source transaction's change; the group reads
// the table once after the merge, docs/bootstrap.md), and the later changes of the
// table as usual.
func TestBootstrapConsumerGroup(t *testing.T) {
	t.Parallel()
	db := groupsSetup(t)
	mustExec(t, db, `SELECT synchro.create_consumer_group('whole')`)
	mustExec(t, db, `CREATE TABLE filled (id int8 PRIMARY KEY, owner text);
		INSERT INTO filled SELECT i, 'a' FROM generate_series(1, 50) i;
		SELECT synchro.register_table('filled', 'filled');
		SELECT synchro.add_scope_rule('filled', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	waitBootstraps(t, db)
	mustExec(t, db, `INSERT INTO filled VALUES (51, 'a')`)
	eventually(t, 60*time.Second, "the later insert materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'filled'`) == 51 && countOf(t, db, `SELECT count(*) FROM synchro.change WHERE table_id = 'filled'`) == 1
	})

	c := consumerConn(t, db)
	tok, err := acquireLease(c, "whole", "owner-a", 60)
	require.NoError(t, err)
	got := []string{}
	for range 20 {
		r, err := readChanges(c, "whole", tok, 100, 1<<20)
		require.NoError(t, err)
		for _, x := range r.Transactions {
			for _, ch := range x.Changes {
				if ch.Table == "filled" {
					got = append(got, ch.Op+":"+pkText(ch.PK))
				}
			}
		}
		if len(r.Transactions) > 0 {
			require.NoError(t, ackPosition(c, "whole", tok, r.Transactions[len(r.Transactions)-1].Position))
		}
		if !r.HasMore {
			break
		}
	}
	require.Equal(t, []string{"upsert:51"}, got)
}

// TestBootstrapReprojectionChangesReachGroups: a relation already streaming is staged
// again (set_columns). Its writes committed between the activation and the stage's
// consistent point C are folded into the stage, so no source transaction's change
// record carries them: a consumer group lost them, deletions included (at-least-once,
// CONTRACT.md "Consumer groups"). The merge now writes the difference between the
// relation's projection and the stage as the change records of one transaction at
// C - 1, after every transaction materialized before C and before every later one:
// the rows changed or inserted in the window in the new shape, the rows deleted there
// with their deletion's version. Rows the window left alone get none.
func TestBootstrapReprojectionChangesReachGroups(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	ctx := context.Background()
	mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.activate_registry();
		SELECT synchro.create_consumer_group('whole');`)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'a'), ('n2', 'b'), ('n3', 'c')`)
	waitChangeTxns(t, db, 1)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	// Stopped: the activation and the writes after it all commit before the consistent
	// point of the stage the runner takes when it reaches the activation.
	mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'),
		ARRAY['id']::name[]); SELECT synchro.activate_registry();`)
	mustExec(t, db, `UPDATE notes SET body = 'a2' WHERE id = 'n1'`)
	mustExec(t, db, `DELETE FROM notes WHERE id = 'n2'`)
	mustExec(t, db, `INSERT INTO notes VALUES ('n4', 'd')`)
	version := func(pk string) string {
		return textOf(t, db, `SELECT v.version FROM synchro.row_version v JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'notes' AND v.pk = $1`, pk)
	}
	want := []string{
		"upsert:n1:" + version("n1") + `:{"id": "n1"}`,
		"delete:n2:" + version("n2") + ":",
		"upsert:n4:" + version("n4") + `:{"id": "n4"}`,
	}
	startRunner(t, testRunnerConfig(t, db))
	waitBootstraps(t, db)
	mustExec(t, db, `INSERT INTO notes VALUES ('n5', 'e')`)
	want = append(want, "upsert:n5:"+version("n5")+`:{"id": "n5"}`)
	eventually(t, 60*time.Second, "the later insert materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.change WHERE pk = 'n5'`) == 1
	})
	requireNoQuarantine(t, db)

	c := consumerConn(t, db)
	tok, err := acquireLease(c, "whole", "owner-a", 60)
	require.NoError(t, err)
	var txns [][]string
	var positions []string
	for range 20 {
		r, err := readChanges(c, "whole", tok, 1, 1<<20)
		require.NoError(t, err)
		for _, x := range r.Transactions {
			got := []string{}
			for _, ch := range x.Changes {
				row := ""
				if len(ch.Row) > 0 && string(ch.Row) != "null" {
					row = string(ch.Row)
				}
				got = append(got, ch.Op+":"+pkText(ch.PK)+":"+ch.Version+":"+row)
			}
			txns = append(txns, got)
			positions = append(positions, x.Position)
			require.NoError(t, ackPosition(c, "whole", tok, x.Position))
		}
		if !r.HasMore {
			break
		}
	}
	require.Len(t, txns, 3, "the first insert, the window's difference, the later insert: %v", txns)
	require.Len(t, txns[0], 3)
	require.Equal(t, want[:3], txns[1], "the window's changes, in key order")
	require.Equal(t, want[3:], txns[2])
	cp := bootstrapPoint(t, db, "notes")
	var before bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT split_part($1, ':', 2)::pg_lsn = $2::pg_lsn - 1`,
		positions[1], cp).Scan(&before))
	require.True(t, before, "the difference's transaction is at the consistent point less one: %s, %s", positions[1], cp)
}

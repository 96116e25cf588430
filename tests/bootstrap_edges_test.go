package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/tests/runproc"
	"github.com/synchro/synchro/tests/testdb"
)

// From the second independent review (2026-12-04) of the projection bootstrap (docs/bootstrap.md; ADR 001,
// "Causally Bound Projection Baseline And Stream Reset", last paragraph, and "Registry
// activation and relation drift").

// rb2WaitSettled waits until every projection bootstrap merged (or was subsumed), or
// the stream holds a quarantine record, so a stall is reported instead of timing out.
func rb2WaitSettled(t *testing.T, db *testdb.DB, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "projection bootstraps merged or a quarantine", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE merged_at IS NULL AND phase <> 'subsumed'`) == 0 ||
			len(quarantines(t, db)) > 0
	})
}

// rb2LiveSQL is a "owner:" scope of table tbl from the live table: every column but
// the ones in skip (a comma-separated list), with its row version.
func rb2LiveSQL(tbl, skip string) string {
	return fmt.Sprintf(`SELECT '%[1]s', d.id::text, rv.version,
	       (SELECT jsonb_object_agg(k, v) FROM jsonb_each(to_jsonb(d)) x(k, v)
	         WHERE NOT k = ANY (string_to_array('%[2]s', ',')))::text
	  FROM %[1]s d JOIN synchro.row_version rv
	    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = '%[1]s') AND rv.pk = d.id::text
	 WHERE 'owner:' || d.owner = $1`, tbl, skip)
}

// TestBootstrapEdgeSupersededToastUpdate: (was a bug, fixed) a relation whose projection bootstrap is
// superseded by a later activation before it merged (_bootstrap_supersede) has its
// events between the two activations materialized "as any" against a projection that
// does not hold its rows (a new relation whose first stage never merged) or holds them
// in the old shape (a re-projection adding the column). An UPDATE that leaves an
// out-of-line (TOASTed) registered column unchanged comes from the WAL without that
// value (pgoutput's unchanged-TOAST marker); the reference path takes it from the prior
// projection, finds none, and quarantines a valid source transaction as toast_missing
// (SYP07): the stream blocks for good, and only a stream reset gets it out.
//
// Rules broken: docs/bootstrap.md ("subsumed ... an earlier shape that no longer
// stages cannot hold the stream"; the later bootstrap "stages the newest shape") and
// ADR 001 (poison is a transaction that cannot be decoded, validated or materialized;
// this one is valid, and the superseding stage, taken after the second activation,
// holds its effect). Likely fix: while a later bootstrap of the relation is not merged,
// drop the relation's events of the transactions between the superseded activation and
// the superseding stage's consistent point (they are in that stage's snapshot), as
// _bootstrap_catch_up does for an ordinary stage; or at least take an unchanged-TOAST
// value whose row has no prior projection as "absent" instead of poison when a later
// bootstrap of the relation will replace the projection.
func TestBootstrapEdgeSupersededToastUpdate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// reproject: the table streams already (columns id, owner) and the first
		// activation re-projects it (every column); else it is new to the stream.
		reproject bool
		// second is the superseding reconfiguration (relation_id $1).
		second string
	}{
		{"new-then-set-columns", false, `SELECT synchro.set_columns(%d, ARRAY['id', 'owner', 'body']::name[])`},
		{"new-then-unregister", false, `SELECT synchro.unregister_relation(%d)`},
		{"reprojected-then-set-columns", true, `SELECT synchro.set_columns(%d, ARRAY['id', 'owner', 'body']::name[])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := runnerSetup(t)
			mustExec(t, db, `CREATE TABLE big (id int8 PRIMARY KEY, owner text, body text, note text);
				ALTER TABLE big ALTER COLUMN body SET STORAGE EXTERNAL;
				INSERT INTO big SELECT i, 'o1', repeat(md5(i::text), 200), 'n' FROM generate_series(1, 5) i;`)
			if tc.reproject {
				mustExec(t, db, `SELECT synchro.register_table('big', 'big', ARRAY['id', 'owner']::name[]);
					SELECT synchro.add_scope_rule('big', 'owner:', 'owner');
					SELECT synchro.activate_registry();`)
			}
			rr := startRunner(t, testRunnerConfig(t, db))
			waitStream(t, db)
			rb2WaitSettled(t, db, 60*time.Second)
			require.NoError(t, rr.stop(t))
			waitRunnerGone(t, db)
			require.Equal(t, 5, countOf(t, db, `SELECT count(DISTINCT chunk_id)::int FROM `+toastTable(t, db, "big")),
				"every body is stored out of line")

			// The runner is down (a migration, a restart): two activations before it
			// stages the first one's bootstrap.
			if tc.reproject {
				mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'big'), NULL);
					SELECT synchro.activate_registry();`)
			} else {
				mustExec(t, db, `SELECT synchro.register_table('big', 'big');
					SELECT synchro.add_scope_rule('big', 'owner:', 'owner');
					SELECT synchro.activate_registry();`)
			}
			// Leaves body (out of line) unchanged: unchanged TOAST in the WAL.
			mustExec(t, db, `UPDATE big SET owner = 'o2' WHERE id = 1`)
			mustExec(t, db, fmt.Sprintf(tc.second, relationID(t, db, "big"))+`; SELECT synchro.activate_registry()`)
			require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap_status WHERE table_id = 'big' AND phase = 'subsumed'`))

			startRunner(t, testRunnerConfig(t, db))
			rb2WaitSettled(t, db, 60*time.Second)
			require.Empty(t, quarantines(t, db), "a valid source transaction must not block the stream")
			write(t, db, `INSERT INTO items (id, owner) VALUES (100, 'a')`)
			if tc.name == "new-then-unregister" {
				require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE relation_id = $1`, relationID(t, db, "big")))
				return
			}
			for _, s := range []string{"owner:o1", "owner:o2"} {
				rows, _ := fullRebuild(t, db, "c", s, 100)
				rep := replica{}
				rep.applyRebuild(t, rows)
				requireReplica(t, liveScope(t, db, rb2LiveSQL("big", "note"), s), rep, s)
			}
		})
	}
}

// TestBootstrapEdgeActivationDuringStagingBlocksWriters: (was a bug, fixed) the staging transaction
// locks each staged table SHARE UPDATE EXCLUSIVE (synchro._live_shape_check) until it
// commits, that is for the whole copy of its rows. Any registry activation meanwhile,
// even one that changes nothing about that table (here a scope rule of notes), runs
// CREATE OR REPLACE TRIGGER on every registered table: it takes SHARE ROW EXCLUSIVE on
// the tables before the staged one and then queues behind the staging's lock on it. So
// every write to every registered table, the staged table's included (their ROW
// EXCLUSIVE queues behind the activation's request), waits until the copy of the staged
// table commits: seconds to minutes for a large table (docs/bootstrap.md measures 2 to
// 17 s of staging for 100,000 rows). A second activation that re-projects the staged
// relation waits the same way (and in _bootstrap_supersede for the bootstrap lock).
//
// Rules broken: docs/bootstrap.md "Every source transaction whose commit record is
// before C is in the snapshot; every later one is in the WAL after C. Writers of the
// table never wait for any of this.", "no table is locked for the copy" and "The
// price: the main worker stops at the activation ... Writes never wait."; and
// docs/sql/activate_registry.md (the activation "copies nothing"). A long copy is
// simulated by holding a SHARE lock on synchro.bootstrap_coverage, which the staging
// transaction writes after it locked and copied the table. Likely fix: stage without
// holding a lock that conflicts with the activation's trigger DDL for the whole copy
// (ACCESS SHARE, as the copy's own read, with the shape re-checked after the copy), or
// make activate_registry wait for a running stage before it takes any trigger lock.
func TestBootstrapEdgeActivationDuringStagingBlocksWriters(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 3), 'doc ' || i FROM generate_series(1, 300) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	ctx := context.Background()

	// The first activation with the runner stopped.
	registerDocsStopped(t, e)

	release := holdStagingCopy(t, e)
	// Another activation: a scope rule of another table, nothing about docs.
	second := activateAsync(t, db, `SELECT synchro.add_scope_rule('notes', 'writer:', 'owner')`)
	// The activation does not wait for the copy (it queued behind the stage's SHARE
	// UPDATE EXCLUSIVE lock on docs, with every writer behind it).
	select {
	case err := <-second:
		require.NoError(t, err, "an activation while a stage is taken")
		second <- nil
	case <-time.After(30 * time.Second):
		t.Fatal("the activation waited for the staging copy")
	}

	// Writes to a registered table that no bootstrap touches, and to docs.
	try := func(sql string) (time.Duration, error) {
		w, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer w.Release()
		began := time.Now()
		_, werr := w.Exec(ctx, `SET statement_timeout = '2s'; `+sql)
		_, _ = w.Exec(ctx, `RESET statement_timeout`)
		return time.Since(began), werr
	}
	tookTasks, errTasks := try(`INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'during the stage')`)
	tookDocs, errDocs := try(`INSERT INTO docs VALUES (1001, 't1', 'during the stage')`)

	// Let the stage finish; everything completes.
	release()
	require.NoError(t, <-second)
	waitBootstraps(t, db)
	requireNoQuarantine(t, db)
	write(t, db, `INSERT INTO docs VALUES (1002, 't1', 'after')`)
	rows, _ := fullRebuild(t, db, "c", "team:t1", 1000)
	rep := replica{}
	rep.applyRebuild(t, rows)
	requireReplica(t, liveScope(t, db, liveDocsSQL, "team:t1"), rep, "team:t1")

	require.NoError(t, errTasks, "a write to another registered table waited %v for the staging copy", tookTasks.Round(time.Millisecond))
	require.NoError(t, errDocs, "a write to the staged table waited %v for the staging copy", tookDocs.Round(time.Millisecond))
}

// TestBootstrapEdgeKilledUnderWriters: a filled table (3,000 rows) registered while
// two writers insert, move, rewrite and delete its rows continuously, with `synchro
// run` SIGKILLed while staging, after the stage committed, and at the first
// materialization after it (the merge's batch, not committed). After the last start
// every client, rebuilt right after the merge while the writers go on and then pulled,
// or rebuilt at the end, equals the live table; the projection holds every live row
// once, with the version of synchro.row_version, and nothing is quarantined.
func TestBootstrapEdgeKilledUnderWriters(t *testing.T) {
	t.Parallel()
	bin := runproc.BuildT(t, runproc.FaultTag)
	db := runnerSetup(t)
	mustExec(t, db, `CREATE TABLE filled (id int8 PRIMARY KEY, owner text, body text);
		INSERT INTO filled SELECT i, 'o' || (i % 3), 'b' || i FROM generate_series(1, 3000) i;`)
	p := startProc(t, bin, db, fault.Spec{Point: fault.BootstrapStaging, N: 1}.String())
	waitStream(t, db)
	w := startWriters(t, db, 2, time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		switch i % 5 {
		case 0:
			return fmt.Sprintf(`INSERT INTO filled VALUES (%d, 'o%d', 'new')`, 10000+i, i%3)
		case 1:
			return fmt.Sprintf(`UPDATE filled SET owner = 'o%d' WHERE id = %d`, i%3, 1+(i*7)%3000)
		case 2:
			return fmt.Sprintf(`UPDATE filled SET body = body || 'x' WHERE id = %d`, 1+(i*11)%3000)
		case 3:
			return fmt.Sprintf(`DELETE FROM filled WHERE id = %d`, 1+(i*13)%3000)
		default:
			return fmt.Sprintf(`INSERT INTO filled VALUES (%d, 'o1', 'back') ON CONFLICT (id) DO UPDATE SET body = 'again'`, 1+(i*17)%3000)
		}
	})
	time.Sleep(100 * time.Millisecond)
	mustExec(t, db, `SELECT synchro.register_table('filled', 'filled');
		SELECT synchro.add_scope_rule('filled', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	requireBootstrapDeath(t, p, fault.BootstrapStaging)
	waitRunnerGone(t, db)
	p = startProc(t, bin, db, fault.Spec{Point: fault.BootstrapStaged, N: 1}.String())
	requireBootstrapDeath(t, p, fault.BootstrapStaged)
	waitRunnerGone(t, db)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'staged' AND attempt = 2`))
	p = startProc(t, bin, db, fault.Spec{Point: fault.BeforeCommit, N: 1}.String())
	requireBootstrapDeath(t, p, fault.BeforeCommit)
	waitRunnerGone(t, db)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'staged' AND merged_at IS NULL`),
		"not merged: the batch that merges it did not commit")
	p = startProc(t, bin, db, "")
	waitBootstraps(t, db)

	// Rebuilt right after the merge, while the writers go on.
	pg := rebuildWhenMaterialized(t, db, "b", "owner:o1", 10000)
	require.False(t, pg.HasMore)
	repB := replica{}
	repB.applyRebuild(t, pg.Rows)
	time.Sleep(300 * time.Millisecond)
	w.Stop()
	require.Greater(t, w.Attempts(), int64(100))
	write(t, db, `INSERT INTO items (id, owner) VALUES (100, 'a')`)
	ch, _ := pullAll(t, db, "b", "owner:o1", pg.Cursor, 1000)
	repB.apply(t, ch)
	requireReplica(t, liveScope(t, db, rb2LiveSQL("filled", ""), "owner:o1"), repB, "owner:o1 rebuilt during the writes, then pulled")
	for _, s := range []string{"owner:o0", "owner:o1", "owner:o2"} {
		rows, _ := fullRebuild(t, db, "c", s, 1000)
		rep := replica{}
		rep.applyRebuild(t, rows)
		requireReplica(t, liveScope(t, db, rb2LiveSQL("filled", ""), s), rep, s)
	}
	rid := relationID(t, db, "filled")
	require.Equal(t, countOf(t, db, `SELECT count(*) FROM filled`),
		countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE relation_id = $1`, rid))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM filled f
		LEFT JOIN synchro.projection p ON p.relation_id = $1 AND p.pk = f.id::text
		LEFT JOIN synchro.row_version v ON v.relation_id = $1 AND v.pk = f.id::text
		WHERE p.version IS DISTINCT FROM v.version OR v.deleted`, rid), "projected versions are the row versions")
	requireNoQuarantine(t, db)
	require.NoError(t, p.Stop(10*time.Second))
}

// TestBootstrapEdgeSupersedeWhileStaging: with the runner running and two writers
// writing the table, a second activation re-projects the relation (set_columns) while
// the runner stages the first activation's bootstrap (held open). Whichever way the
// race goes (the first stage merged before the second activation committed, or
// superseded by it), the second activation succeeds, the stream never blocks, and every
// scope rebuilds and pulls to the live table in the second shape.
func TestBootstrapEdgeSupersedeWhileStaging(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 3), 'doc ' || i FROM generate_series(1, 500) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	ctx := context.Background()
	registerDocsStopped(t, e)
	w := startWriters(t, db, 2, time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		switch i % 3 {
		case 0:
			return fmt.Sprintf(`INSERT INTO docs VALUES (%d, 't%d', 'new')`, 10000+i, i%3)
		case 1:
			return fmt.Sprintf(`UPDATE docs SET team = 't%d', body = 'moved' WHERE id = %d`, i%3, 1+(i*7)%500)
		default:
			return fmt.Sprintf(`DELETE FROM docs WHERE id = %d`, 1+(i*13)%500)
		}
	})

	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	held := true
	defer func() {
		if held {
			_ = hold.Rollback(ctx)
		}
	}()
	_, err = hold.Exec(ctx, `LOCK TABLE synchro.bootstrap_coverage IN SHARE MODE`)
	require.NoError(t, err)
	e.startRunner(t)
	eventually(t, 60*time.Second, "the staging transaction copying docs", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.relation = 'synchro.bootstrap_coverage'::regclass AND NOT l.granted AND a.datname = current_database()`) == 1
	})
	op2 := newOperator(t, db)
	second := make(chan error, 1)
	rid := relationID(t, db, "docs")
	go func() {
		_, err := op2.conn.Exec(context.Background(), `SELECT synchro.set_columns($1, ARRAY['id', 'team']::name[])`, rid)
		if err == nil {
			_, err = op2.conn.Exec(context.Background(), `SELECT synchro.activate_registry()`)
		}
		second <- err
	}()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, hold.Rollback(ctx))
	held = false
	require.NoError(t, <-second, "the second activation")
	rb2WaitSettled(t, db, 60*time.Second)
	requireNoQuarantine(t, db)
	p := rebuildWhenMaterialized(t, db, "b", "team:t1", 10000)
	repB := replica{}
	repB.applyRebuild(t, p.Rows)
	time.Sleep(200 * time.Millisecond)
	w.Stop()
	write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'last')`)
	live := func(s string) replica {
		return liveScope(t, db, `SELECT 'docs', d.id::text, rv.version, jsonb_build_object('id', d.id, 'team', d.team)::text
		  FROM docs d JOIN synchro.row_version rv
		    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'docs') AND rv.pk = d.id::text
		 WHERE 'team:' || d.team = $1`, s)
	}
	ch, _ := pullAll(t, db, "b", "team:t1", p.Cursor, 1000)
	repB.apply(t, ch)
	requireReplica(t, live("team:t1"), repB, "team:t1 rebuilt during the writes, then pulled")
	for _, s := range []string{"team:t0", "team:t2"} {
		rows, _ := fullRebuild(t, db, "c", s, 1000)
		rep := replica{}
		rep.applyRebuild(t, rows)
		requireReplica(t, live(s), rep, s)
	}
	t.Logf("bootstraps: %d merged, %d subsumed; writes %d",
		countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'merged'`),
		countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE phase = 'subsumed'`), w.Attempts())
}

// TestBootstrapEdgeSetColumnsAddsColumnUnderUpdates: a column that existed but was
// not registered is added (set_columns) while a writer keeps changing it and moving
// rows between scopes; rows written before the activation, between the activation and
// the consistent point, and after it all carry the column's current value after the
// merge, for a client rebuilt during the writes and then pulled, and for fresh rebuilds.
func TestBootstrapEdgeSetColumnsAddsColumnUnderUpdates(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `ALTER TABLE notes ADD COLUMN extra text;
		INSERT INTO notes SELECT 'n' || i, 'o' || (i % 2), 'body ' || i, 'x' || i FROM generate_series(1, 400) i;
		GRANT SELECT ON notes TO synchro_operator;`)
	db := e.db
	rid := relationID(t, db, "notes")
	mustExec(t, db, fmt.Sprintf(`SELECT synchro.set_columns(%d, ARRAY['id', 'owner', 'body']::name[]); SELECT synchro.activate_registry()`, rid))
	waitBootstraps(t, db)
	w := startWriters(t, db, 2, time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		return fmt.Sprintf(`UPDATE notes SET extra = 'w%d', owner = 'o%d' WHERE id = 'n%d'`, i, i%2, 1+(i*7)%400)
	})
	time.Sleep(100 * time.Millisecond)
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, NULL)`, rid))
	g := op.activate(t)
	waitRegistry(t, db, g)
	p := rebuildWhenMaterialized(t, db, "b", "owner:o1", 10000)
	rep := replica{}
	rep.applyRebuild(t, p.Rows)
	time.Sleep(200 * time.Millisecond)
	w.Stop()
	write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'zz', 'last')`)
	ch, _ := pullAll(t, db, "b", "owner:o1", p.Cursor, 1000)
	rep.apply(t, ch)
	liveNotes := `SELECT 'notes', n.id, rv.version, to_jsonb(n)::text FROM notes n JOIN synchro.row_version rv
		ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'notes') AND rv.pk = n.id
		WHERE 'owner:' || n.owner = $1`
	requireReplica(t, liveScope(t, db, liveNotes, "owner:o1"), rep, "owner:o1 rebuilt during the writes, then pulled")
	for _, s := range []string{"owner:o0", "owner:o1"} {
		rows, _ := fullRebuild(t, db, "c", s, 1000)
		fresh := replica{}
		fresh.applyRebuild(t, rows)
		requireReplica(t, liveScope(t, db, liveNotes, s), fresh, s)
	}
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM notes n JOIN synchro.projection p
		ON p.relation_id = $1 AND p.pk = n.id WHERE p.image ->> 'extra' IS DISTINCT FROM n.extra`, rid))
	requireNoQuarantine(t, db)
}

// TestBootstrapEdgeUnregisterBeforeMergeThenRegisterAgain: a filled table
// registered, then unregistered before its bootstrap merged, cannot be registered
// again (a relation is registered once, docs/sql/unregister_relation.md: SY400, not
// another error); the stream goes on, the removal covers the table's accepted push,
// and a recreated copy registered under a new table_id bootstraps its rows.
func TestBootstrapEdgeUnregisterBeforeMergeThenRegisterAgain(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 2), 'doc ' || i FROM generate_series(1, 50) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	ctx := context.Background()
	op := registerDocsStopped(t, e)
	raw, err := pushRawOn(ctx, db.Pool, "pusher", pushJSON(t, pushIns(pushID(), "docs", 5001, pm{"team": "t1", "body": "pushed"})))
	require.NoError(t, err)
	require.Contains(t, raw, `"accepted"`)
	mustExec(t, db, `UPDATE docs SET body = 'between' WHERE id = 3`)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, relationID(t, db, "docs")))
	op.activate(t)
	requireSQLState(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.register_table('docs', 'docs2')`), "SY400")
	mustExec(t, db, `CREATE TABLE docs2 (LIKE docs INCLUDING ALL); INSERT INTO docs2 SELECT * FROM docs; GRANT SELECT ON docs2 TO synchro_operator`)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs2', 'docs2')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs2', 'team:', 'team')`))
	g := op.activate(t)
	e.startRunner(t)
	waitRegistry(t, db, g)
	requireNoQuarantine(t, db)
	rows, _ := fullRebuild(t, db, "pusher", "team:t1", 1000)
	rep := replica{}
	rep.applyRebuild(t, rows)
	requireReplica(t, liveScope(t, db, `SELECT 'docs2', d.id::text, rv.version, to_jsonb(d)::text
		  FROM docs2 d JOIN synchro.row_version rv
		    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'docs2') AND rv.pk = d.id::text
		 WHERE 'team:' || d.team = $1`, "team:t1"), rep, "team:t1")
	require.Contains(t, rep, "docs2/5001")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.projection WHERE relation_id = $1`, relationID(t, db, "docs")))
}

// TestBootstrapEdgeActivationDuringStagingDeadlocks: (was a bug, fixed) the same lock conflict as
// TestBootstrapEdgeActivationDuringStagingBlocksWriters, in opposite orders. One
// staging transaction stages every requested bootstrap in (generation, relation_id)
// order, locking each table SHARE UPDATE EXCLUSIVE until it commits; activate_registry
// takes SHARE ROW EXCLUSIVE on every registered table in relation_id order. Here docs
// (new, generation 2, the higher relation_id) and notes (re-projected, generation 3,
// the lower one) are staged under one snapshot: the stage holds docs and goes on to
// notes, while an unrelated activation holds notes and waits for docs. PostgreSQL
// breaks the cycle by aborting one of them: the operator's activation failed with
// 40P01 (deadlock_detected) in this run, or the stage is thrown away and taken again.
//
// Rule broken: docs/sql/activate_registry.md lists the activation's errors (no
// deadlock) and docs/bootstrap.md says the activation copies nothing and may run at any
// isolation level, retried only on 40001 for a stale snapshot; a projection bootstrap
// in progress is no documented reason for a migration to fail. Likely fix: as in the
// writers' test (no lock conflicting with the trigger DDL held across the stage, or the
// activation waits for the stage before its first trigger lock).
func TestBootstrapEdgeActivationDuringStagingDeadlocks(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 3), 'doc ' || i FROM generate_series(1, 100) i;
		INSERT INTO notes SELECT 'n' || i, 'o1', 'b' || i FROM generate_series(1, 100) i;
		GRANT SELECT ON docs, notes TO synchro_operator;`)
	db := e.db
	op := registerDocsStopped(t, e)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'owner']::name[])`, relationID(t, db, "notes")))
	op.activate(t)
	require.Less(t, relationID(t, db, "notes"), relationID(t, db, "docs"))

	release := holdStagingCopy(t, e)
	second := activateAsync(t, db, `SELECT synchro.add_scope_rule('tasks', 'writer:', 'owner')`)
	// The activation completes while the stage is held: no lock of the stage's
	// conflicts with its trigger DDL (it deadlocked with the stage's SHARE UPDATE
	// EXCLUSIVE locks, taken in another order).
	select {
	case err := <-second:
		second <- err
	case <-time.After(30 * time.Second):
		t.Fatal("the activation waited for the staging copy")
	}
	release()
	errSecond := <-second
	rb2WaitSettled(t, db, 60*time.Second)
	requireNoQuarantine(t, db)
	require.NoError(t, errSecond, "an activation while a stage is taken")
}

// TestBootstrapEdgeLargeTableWritersNeverWait: a 30,000-row table joins a live
// stream while one writer updates its rows and another writes an unrelated registered
// table. No write waits for the bootstrap (docs/bootstrap.md: "Writes never wait"):
// every write runs under lock_timeout, and none fails on it once the activation
// committed; the stream catches up once the stage merged (the other table's writes
// are materialized promptly afterwards), and a scope of the new table rebuilds and
// pulls to the live state. Lock waits, not the writes' wall-clock time, are what the
// bootstrap could cause: on a loaded machine a write took 1.16 s with no lock wait
// at all (CPU), and the old wall-clock bound of a second failed. The bound is far
// below the staging copy's and the merge's seconds and far above a version chunk's
// milliseconds (a writer may meet a row version a chunk is inserting).
const writerLockTimeout = "3s"

func TestBootstrapEdgeLargeTableWritersNeverWait(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 10), 'doc ' || i FROM generate_series(1, 30000) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	ctx := context.Background()
	var slowest, lockWaits [2]atomic.Int64
	var counting atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{}, 2)
	for k, sql := range []string{
		`UPDATE docs SET body = 'w' || $1::text WHERE id = 1 + ($1::int8 * 7919) % 30000`,
		`INSERT INTO tasks (id, project_id, owner, title) VALUES ($1, 1, 'o1', 'w')`,
	} {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := int64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				began := time.Now()
				if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '`+writerLockTimeout+`', true),
						set_config('application_name', 'bootstrap-writer', true)`); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, sql, 100000*int64(k+1)+i)
					return err
				}); err != nil {
					pe := asPgError(err)
					if pe != nil && (pe.Code == "40P01" || pe.Code == "40001") {
						continue
					}
					if pe != nil && pe.Code == "55P03" {
						// The activation's own short transaction locks the tables: not
						// counted until it committed.
						if counting.Load() {
							lockWaits[k].Add(1)
						}
						continue
					}
					t.Errorf("writer %d: %v", k, err)
					return
				}
				if d := int64(time.Since(began)); d > slowest[k].Load() {
					slowest[k].Store(d)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	stopped := false
	stopWriters := func() {
		if !stopped {
			stopped = true
			close(stop)
			<-done
			<-done
		}
	}
	defer stopWriters()
	time.Sleep(100 * time.Millisecond)
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
	// Writes that wait only for the activation's own short transaction are not counted.
	g := op.activate(t)
	counting.Store(true)
	// A table lock the bootstrap took would make a writer wait on a relation lock
	// (a version chunk's row makes it wait on a transaction, briefly): sampled every
	// 2 ms until the writers stop, whatever its length.
	var relationWaits atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int64
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = 'bootstrap-writer' AND wait_event_type = 'Lock' AND wait_event = 'relation'`).Scan(&n); err == nil {
				relationWaits.Add(n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	slowest[0].Store(0)
	slowest[1].Store(0)
	began := time.Now()
	waitRegistry(t, db, g)
	merged := time.Since(began)
	p := rebuildWhenMaterialized(t, db, "b", "team:t1", 10000)
	rep := replica{}
	rep.applyRebuild(t, p.Rows)
	time.Sleep(200 * time.Millisecond)
	stopWriters()
	caught := time.Now()
	write(t, db, `INSERT INTO notes VALUES ('last', 'o1', 'last')`)
	ch, _ := pullAll(t, db, "b", "team:t1", p.Cursor, 1000)
	rep.apply(t, ch)
	requireReplica(t, liveScope(t, db, liveDocsSQL, "team:t1"), rep, "team:t1")
	requireNoQuarantine(t, db)
	t.Logf("merged %v after the activation; slowest write: docs %v, tasks %v; caught up %v after the writers stopped",
		merged.Round(time.Millisecond), time.Duration(slowest[0].Load()).Round(time.Millisecond), time.Duration(slowest[1].Load()).Round(time.Millisecond),
		time.Since(caught).Round(time.Millisecond))
	<-sampled
	require.Zero(t, relationWaits.Load(), "a writer waited for a table lock after the activation")
	require.Zero(t, lockWaits[0].Load(), "a write to the bootstrapped table waited %s for a lock", writerLockTimeout)
	require.Zero(t, lockWaits[1].Load(), "a write to another table waited %s for a lock", writerLockTimeout)
}

// holdStagingCopy starts the runner with the next projection bootstrap's staging
// transaction held at its first write of synchro.bootstrap_coverage, after it locked
// and copied its tables (a long copy), and returns what lets it go on. The holding
// transaction has no transaction id: the slot creation does not wait for it.
func holdStagingCopy(t *testing.T, e *syncEnv) (release func()) {
	t.Helper()
	ctx := context.Background()
	db := e.db
	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	var once sync.Once
	release = func() { once.Do(func() { require.NoError(t, hold.Rollback(ctx)) }) }
	t.Cleanup(func() { once.Do(func() { _ = hold.Rollback(ctx) }) })
	_, err = hold.Exec(ctx, `LOCK TABLE synchro.bootstrap_coverage IN SHARE MODE`)
	require.NoError(t, err)
	e.startRunner(t)
	eventually(t, 60*time.Second, "the staging transaction past its copy", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.relation = 'synchro.bootstrap_coverage'::regclass AND NOT l.granted AND a.datname = current_database()`) == 1
	})
	return release
}

// activateAsync stages sql and activates the registry on an operator session of its
// own, in the background; the channel gets the result.
func activateAsync(t *testing.T, db *testdb.DB, sql string) chan error {
	t.Helper()
	op := newOperator(t, db)
	done := make(chan error, 1)
	go func() {
		_, err := op.conn.Exec(context.Background(), sql)
		if err == nil {
			_, err = op.conn.Exec(context.Background(), `SELECT synchro.activate_registry()`)
		}
		done <- err
	}()
	return done
}

// registerDocsStopped stops e's runner, then registers the table docs with the scope
// rule team: and activates as the operator: the activation's projection bootstrap
// waits for the next runner.
func registerDocsStopped(t *testing.T, e *syncEnv) *operator {
	t.Helper()
	e.stopRunner(t)
	op := newOperator(t, e.db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
	op.activate(t)
	return op
}

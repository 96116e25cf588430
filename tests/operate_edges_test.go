package tests

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The operator's psql surface (registry reconfiguration, poison handling) and its
// interaction with a live stream, from an independent review (2026-12-04). Each test
// names the rule it checks; five were bugs (fixed, each red before its fix: rebind
// conflicts answered 23505 at activation, via rule types unchecked at activation,
// readiness's worker check during a bootstrap, readiness torn across an activation, a
// push in a rebind's window recorded as rejected), the rest were found sound.

// reviewOpActivation runs activate_registry as the operator and returns its error.
func reviewOpActivation(op *operator) error {
	_, err := op.conn.Exec(context.Background(), `SELECT synchro.activate_registry()`)
	return err
}

// TestOperateEdgeRebindConflicts (was a bug, fixed): rebind_relation names a physical table for a
// dropped registered relation. A table may carry at most one registration
// (relation_registered_once; "already registered" is SY400 in register_table and
// rebind_relation). Two dropped relations rebound to the same new table, or a rebind
// and a register_table of the same table in one pending generation, must be refused
// with SY400 (CONTRACT "Error codes": rejected registration), at the call or at
// activation, and never leave the table registered twice.
func TestOperateEdgeRebindConflicts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second string
	}{
		{"TwoRebindsOneTable", `SELECT synchro.rebind_relation(2, 'public.tnew')`},
		{"RebindThenRegister", `SELECT synchro.register_table('public.tnew', 'tnew')`},
		{"RebindThenRegisterDependency", `SELECT synchro.register_dependency('public.tnew')`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			mustExec(t, db, `
				CREATE TABLE a1 (id int8 PRIMARY KEY, owner text);
				CREATE TABLE b1 (id int8 PRIMARY KEY, owner text);
				SELECT synchro.register_table('a1', 'a1');
				SELECT synchro.register_table('b1', 'b1');
				SELECT synchro.add_scope_rule('a1', 'a:', 'owner');
				SELECT synchro.add_scope_rule('b1', 'b:', 'owner');
				SELECT synchro.activate_registry();
				DROP TABLE a1; DROP TABLE b1;
				CREATE TABLE tnew (id int8 PRIMARY KEY, owner text);
				GRANT SELECT ON tnew TO synchro_operator;`)
			require.Equal(t, int64(1), relationID(t, db, "a1"))
			require.Equal(t, int64(2), relationID(t, db, "b1"))
			op := newOperator(t, db)
			require.NoError(t, op.exec(`SELECT synchro.rebind_relation(1, 'public.tnew')`))
			err := op.exec(tc.second)
			if err == nil {
				err = reviewOpActivation(op)
			}
			requireSQLState(t, err, "SY400")
			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.relation WHERE relid = 'public.tnew'::regclass`).Scan(&n))
			require.LessOrEqual(t, n, 1, "one table, one registration")
		})
	}
}

// TestOperateEdgePoisonInBatchRetry: a poison in the middle of several source
// transactions that reach the runner together; retried before the repair (fails again,
// nothing skipped), retry_poison called twice and concurrently, then repaired and
// retried. ADR 001 "Poison-event quarantine and recovery": the quarantine names the
// failing transaction, nothing after it becomes visible, and after the retry every
// transaction is materialized exactly once, in commit order, with its own replay
// identity; a client's pulls see exactly the writes, once each, in order.
func TestOperateEdgePoisonInBatchRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	_, cur := startScope(t, db, "c1", "owner:a")

	mustExec(t, db, `
		CREATE FUNCTION public.review_refuse_13() RETURNS trigger LANGUAGE plpgsql AS
		  $$ BEGIN IF NEW.pk = '13' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER review_refuse_13 BEFORE INSERT ON synchro.effect
		  FOR EACH ROW EXECUTE FUNCTION public.review_refuse_13();`)

	held, release := holdMaterialization(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (11, 'a')`)
	held()
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (13, 'a')`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (15, 'a')`)
	mustExec(t, db, `UPDATE items SET v = 99 WHERE id = 11`)
	release()

	var q []quarantineRow
	eventually(t, 20*time.Second, "the quarantine", func() bool {
		q = quarantines(t, db)
		return len(q) == 1
	})
	var lsn13 string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT min(e.commit_lsn)::text FROM synchro.event e WHERE e.pk = '11'`).Scan(&lsn13))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '11'`), "the transaction before the poison is materialized")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk IN ('13', '15') OR (pk = '11' AND commit_lsn > $1::pg_lsn)`, lsn13),
		"nothing at or after the poison")
	requireBlockedAt(t, db, q[0])

	// Retry without repair: the same transaction fails again, with the same identity.
	mustExec(t, db, `SELECT synchro.retry_poison()`)
	eventually(t, 20*time.Second, "a second attempt", func() bool {
		qs := quarantines(t, db)
		return len(qs) == 1 && qs[0].Attempts >= 2 && countOf(t, db, `SELECT count(*) FROM synchro.poison WHERE NOT retry_requested`) == 1
	})
	require.Equal(t, q[0].CommitLSN, quarantines(t, db)[0].CommitLSN)
	requireBlockedAt(t, db, quarantines(t, db)[0])
	// A pull meanwhile sees only what came before the poison.
	ch, _ := pullAll(t, db, "c1", "owner:a", cur, 100)
	require.Equal(t, []string{"upsert:items/11"}, opsOf(ch))

	// Repair, then two operators ask for the retry at once.
	mustExec(t, db, `DROP TRIGGER review_refuse_13 ON synchro.effect`)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			op := newOperator(t, db)
			errs[i] = op.exec(`SELECT synchro.retry_poison()`)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			requireSQLState(t, err, "SY400") // only if the runner already resolved it
		}
	}
	eventually(t, 30*time.Second, "the retried stream", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '15'`) == 1
	})
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (17, 'a')`)
	eventually(t, 30*time.Second, "a later write", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '17'`) == 1
	})
	// A late retry_poison with nothing blocked is refused and changes nothing.
	requireSQLState(t, newOperator(t, db).exec(`SELECT synchro.retry_poison()`), "SY400")

	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '13' AND commit_lsn = $1::pg_lsn`, q[0].CommitLSN),
		"the retried transaction keeps its replay identity")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM (SELECT commit_lsn FROM synchro.txn GROUP BY 1 HAVING count(*) > 1) x`))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM (SELECT commit_lsn, event_ordinal FROM synchro.event GROUP BY 1, 2 HAVING count(*) > 1) x`))
	qs := quarantines(t, db)
	require.Len(t, qs, 1)
	require.True(t, qs[0].Resolved)

	// Pulls from the pre-poison cursor: each write once, in commit order.
	ch, _ = pullAll(t, db, "c1", "owner:a", cur, 100)
	require.Equal(t, []string{"upsert:items/11", "upsert:items/13", "upsert:items/15", "upsert:items/11", "upsert:items/17"}, opsOf(ch))
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
}

// TestOperateEdgeRuleRemovedThenReadded: remove_scope_rules in one generation, the
// same rule added again in a later one. CONTRACT "Registry": a prefix's cursors become
// stale (SY409) when its rules change, never reinterpreted. A cursor taken while the
// prefix had no rules (an empty scope) must not silently resume over the re-added
// membership (it would miss every member row), and a cursor from before the removal
// must not come back to life when the rule set is the same again (it would miss every
// write of the window without the rule).
func TestOperateEdgeRuleRemovedThenReadded(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	_, c0 := startScope(t, db, "c1", "owner:a")
	op := newOperator(t, db)

	// The same rule removed and re-added within one pending generation: no change.
	require.NoError(t, op.exec(`SELECT synchro.remove_scope_rules('items')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('items', 'owner:', 'owner')`))
	g := op.activate(t)
	waitRegistry(t, db, g)
	write(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	ch, c0 := pullAll(t, db, "c1", "owner:a", c0, 100)
	require.Equal(t, []string{"upsert:items/3"}, opsOf(ch), "an unchanged rule set keeps the cursor")

	// Removed, with a rebuild session left in the middle.
	mid := mustRebuildPage(t, db, "c9", "owner:a", "", 1)
	require.True(t, mid.HasMore)
	require.NoError(t, op.exec(`SELECT synchro.remove_scope_rules('items')`))
	g = op.activate(t)
	waitRegistry(t, db, g)
	_, err := pullRaw(db, "c1", "owner:a", c0, 100)
	requireSQLState(t, err, "SY409")
	_, err = rebuildRaw(db, "c9", "owner:a", mid.Session, 1)
	requireSQLState(t, err, "SY409")
	rep, c1 := startScope(t, db, "c2", "owner:a")
	require.Empty(t, rep, "a prefix without rules has no members")

	// Writes in the window without the rule.
	write(t, db, `INSERT INTO items (id, owner) VALUES (4, 'a'); UPDATE items SET v = 50 WHERE id = 1`)

	// Added again: the same rule set as before the removal.
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('items', 'owner:', 'owner')`))
	g = op.activate(t)
	waitRegistry(t, db, g)
	write(t, db, `INSERT INTO items (id, owner) VALUES (6, 'a')`)

	for name, cur := range map[string]string{"before the removal": c0, "while removed": c1} {
		p, err := pullRaw(db, "c1", "owner:a", cur, 100)
		if err == nil {
			// Accepted: then it must converge to the scope's state (rows 1, 3, 4, 6).
			seen := map[string]bool{}
			for _, c := range p.Changes {
				seen[c.key()] = true
			}
			require.True(t, seen["items/1"] && seen["items/4"] && seen["items/3"] && seen["items/6"],
				"a cursor %s resumed over the re-added rule and missed rows: %v", name, opsOf(p.Changes))
			continue
		}
		requireSQLState(t, err, "SY409")
	}
	rep, c3 := startScope(t, db, "c3", "owner:a")
	require.Len(t, rep, 4)
	write(t, db, `UPDATE items SET v = 51 WHERE id = 4`)
	ch, _ = pullAll(t, db, "c3", "owner:a", c3, 100)
	require.Equal(t, []string{"upsert:items/4"}, opsOf(ch))
	requireNoQuarantine(t, db)
}

// TestOperateEdgeUnregisterUnderHeldWriters: unregister_relation activated while an
// application transaction that wrote the table is still open and the runner is stopped
// (behind). docs/runbook.md "Projection bootstrap and reconfiguration": writes to
// registered tables wait only for the activation's trigger statements; no poison (a
// legitimate write never blocks the stream), every write committed before the
// activation is materialized once under the old registration, none after it, and the
// prefix's cursors are stale (SY409) while other tables keep streaming.
func TestOperateEdgeUnregisterUnderHeldWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one'); INSERT INTO tasks (id, owner, title) VALUES (1, 'o1', 't1')`)
	_, cur := startScope(t, db, "c1", "owner:o1")
	notes := relationID(t, db, "notes")
	e.stopRunner(t)

	mustExec(t, db, `INSERT INTO notes VALUES ('w1', 'o1', 'committed while the runner is stopped')`)
	holder, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO notes VALUES ('h1', 'o1', 'held')`)
	require.NoError(t, err)

	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, notes))
	done := make(chan error, 1)
	var g int64
	go func() {
		done <- op.conn.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&g)
	}()
	eventually(t, 20*time.Second, "the activation to wait for the held writer", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%activate_registry%'`) > 0
	})
	_, err = tx.Exec(ctx, `INSERT INTO notes VALUES ('h2', 'o1', 'held, second'); UPDATE notes SET body = 'held update' WHERE id = 'n1'`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)

	// After the activation: no fence, not published.
	mustExec(t, db, `INSERT INTO notes VALUES ('after', 'o1', 'after the unregister'); INSERT INTO tasks (id, owner, title) VALUES (2, 'o1', 't2')`)
	e.startRunner(t)
	waitRegistry(t, db, g)
	eventually(t, 30*time.Second, "the task after the unregister", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.relation r USING (relation_id) WHERE r.table_id = 'tasks' AND e.pk = '2'`) == 1
	})
	requireNoQuarantine(t, db)
	for _, pk := range []string{"w1", "h1", "h2"} {
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE relation_id = $1 AND pk = $2 AND op <> 'delete'`, notes, pk), pk)
	}
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE relation_id = $1 AND pk = 'n1'`, notes))
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE relation_id = $1 AND pk = 'after'`, notes))

	_, err = pullRaw(db, "c1", "owner:o1", cur, 100)
	requireSQLState(t, err, "SY409")
	rep, cur2 := startScope(t, db, "c1", "owner:o1")
	require.Equal(t, []string{"tasks/1", "tasks/2"}, sortedKeys(rep))
	write(t, db, `UPDATE tasks SET title = 'again' WHERE id = 1; INSERT INTO notes VALUES ('late', 'o1', 'x')`)
	ch, _ := pullAll(t, db, "c1", "owner:o1", cur2, 100)
	require.Equal(t, []string{"upsert:tasks/1"}, opsOf(ch))
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
}

func sortedKeys(r replica) []string {
	out := make([]string, 0, len(r))
	for k := range r {
		out = append(out, k)
	}
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestOperateEdgeRetypedViaColumnRule (was a bug, fixed): docs/sql/add_scope_rule.md refuses (SY400) a
// via rule whose column_name and via_match are not of one type whose text is its
// equality, because "the match compares the rendered values, so numeric (scale: 1.0 =
// 1.00) ... and nondeterministic collations would disagree with SQL equality and match
// nothing". The same state must not be reachable unchecked through the documented
// reconfigurations: "retype" (ALTER TABLE, set_columns and activate_registry in one
// transaction, docs/sql/set_columns.md), "rebind" (the dependency dropped and
// recreated with a numeric column, docs/runbook.md) or "collation" (the columns get a
// nondeterministic collation: no drift, readiness ok). Either the change is refused
// with SY400, or membership still follows the rule's equality (CONTRACT "Registry": a
// row belongs to every dependency row whose via_match equals its column).
func TestOperateEdgeRetypedViaColumnRule(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"retype", "rebind", "collation"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			reviewOpRetypedVia(t, how)
		})
	}
}

func reviewOpRetypedVia(t *testing.T, how string) {
	ctx := context.Background()
	if how == "collation" {
		reviewOpViaCollation(t)
		return
	}
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1'); INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 't1')`)
	dep := countOf(t, db, `SELECT relation_id::int FROM synchro.relation WHERE registration_kind = 'capture_dependency'`)

	var g int64
	switch how {
	case "retype":
		// The documented way out of a retyped column: one transaction.
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `ALTER TABLE project_members ALTER COLUMN project_id TYPE numeric`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT synchro.set_columns($1, ARRAY['project_id', 'user_id']::name[])`, dep)
		require.NoError(t, err)
		err = tx.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&g)
		if err != nil {
			requireSQLState(t, err, "SY400") // refused: the rule's types no longer agree
			return
		}
		require.NoError(t, tx.Commit(ctx))
	case "rebind":
		// docs/runbook.md: a registered table dropped and recreated, then rebound.
		mustExec(t, db, `BEGIN;
			CREATE TABLE pm_new (id int8 PRIMARY KEY, project_id numeric NOT NULL, user_id text NOT NULL);
			INSERT INTO pm_new SELECT * FROM project_members;
			DROP TABLE project_members;
			ALTER TABLE pm_new RENAME TO project_members;
			GRANT SELECT ON project_members TO synchro_operator;
			COMMIT;`)
		op := newOperator(t, db)
		if err := op.exec(`SELECT synchro.rebind_relation($1, 'public.project_members')`, dep); err != nil {
			requireSQLState(t, err, "SY400")
			return
		}
		var refused error
		eventually(t, 60*time.Second, "activation accepted or refused for the rule", func() bool {
			err := op.conn.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&g)
			if pe := asPgError(err); pe != nil && pe.Code == "SY400" && strings.Contains(pe.Message, "not processed") {
				time.Sleep(50 * time.Millisecond)
				return false
			}
			refused = err
			return true
		})
		if refused != nil {
			requireSQLState(t, refused, "SY400")
			return
		}
	}
	waitRegistry(t, db, g)

	// 1.0 = 1 in SQL: u2 is a member of project 1 as much as u1.
	write(t, db, `INSERT INTO project_members VALUES (2, 1.0, 'u2')`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM tasks t JOIN project_members m ON m.project_id = t.project_id WHERE m.user_id = 'u2'`))
	requireNoQuarantine(t, db)
	rep, _ := startScope(t, db, "c2", "user:u2")
	require.Contains(t, rep, "tasks/1", "the via rule over a retyped numeric column matches nothing for an equal value")
}

// TestOperateEdgeUnregisterDroppedTableRunnerBehind: docs/runbook.md "Reading
// readiness", registry row: relation_missing (a registered table dropped) → a new
// registry generation, no reset: rebind_relation "(or unregister_relation)". Here the
// runner is behind: writes to the table committed before the drop are still in the WAL
// when the operator unregisters it. Rebind waits for the runner to pass the drop;
// unregister must be just as safe: no poison, the old writes materialized once under
// the registration they were written in, the stream ready again.
func TestOperateEdgeUnregisterDroppedTableRunnerBehind(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one'); INSERT INTO tasks (id, owner, title) VALUES (1, 'o1', 't1')`)
	notes := relationID(t, db, "notes")
	e.stopRunner(t)
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'before the drop'); UPDATE notes SET body = 'changed' WHERE id = 'n1'`)
	mustExec(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'o1', 't2')`)
	mustExec(t, db, `DROP TABLE notes`)
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, notes))
	g := op.activate(t)
	mustExec(t, db, `INSERT INTO tasks (id, owner, title) VALUES (3, 'o1', 't3')`)
	e.startRunner(t)
	waitRegistry(t, db, g)
	eventually(t, 30*time.Second, "the task after the unregister, or a poison", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.event e JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'tasks' AND e.pk = '3'`) == 1 || len(quarantines(t, db)) > 0
	})
	requireNoQuarantine(t, db)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE relation_id = $1 AND pk = 'n2'`, notes))
	rep, _ := startScope(t, db, "c1", "owner:o1")
	require.Equal(t, []string{"tasks/1", "tasks/2", "tasks/3"}, sortedKeys(rep))
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
}

// TestOperateEdgeSetColumnsRuleAndKey: set_columns never drops the key (always
// included, CONTRACT register_table) and refuses (SY400) a list that leaves out a
// column a scope rule uses, its own or a via rule's through the dependency.
func TestOperateEdgeSetColumnsRuleAndKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, syncSchema)
	op := newOperator(t, db)
	tasks, notes := relationID(t, db, "tasks"), relationID(t, db, "notes")
	dep := int64(countOf(t, db, `SELECT relation_id::int FROM synchro.relation WHERE registration_kind = 'capture_dependency'`))
	mustExec(t, db, `GRANT SELECT ON tasks, notes, project_members TO synchro_operator`)

	var cols []string
	require.NoError(t, op.conn.QueryRow(context.Background(), `SELECT synchro.set_columns($1, ARRAY['owner']::name[])::text[]`, notes).Scan(&cols))
	require.Equal(t, []string{"id", "owner"}, cols, "the key is always included")
	requireSQLState(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'body']::name[])`, notes), "SY400")
	requireSQLState(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['owner', 'title']::name[])`, tasks), "SY400") // project_id of the via rule
	requireSQLState(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['project_id']::name[])`, dep), "SY400")       // via_scope
	requireSQLState(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['user_id']::name[])`, dep), "SY400")          // via_match
	// After removing the rules, the column may go; the activation is consistent.
	require.NoError(t, op.exec(`SELECT synchro.remove_scope_rules('notes')`))
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['body']::name[])`, notes))
	// A rule added afterwards on a column the list left out is refused.
	requireSQLState(t, op.exec(`SELECT synchro.add_scope_rule('notes', 'owner:', 'owner')`), "SY400")
	op.activate(t)
}

// TestOperateEdgeUnregisterDoesNotDiscardPoison: a fence_mismatch poison on notes
// (a write that bypassed the fence triggers). The operator unregisters notes and
// retries. ADR 001: "No recovery path may silently discard, synthesize, or reinterpret
// a poisoned source transaction"; recovery is a repair and retry of the same
// transaction or a stream reset. The activation comes after the poison in source
// order, so the retry meets the same failure: still blocked at the same identity,
// nothing after it materialized.
func TestOperateEdgeUnregisterDoesNotDiscardPoison(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one'); INSERT INTO project_members VALUES (1, 1, 'u1');
		INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 't1')`)
	_, cur := startScope(t, db, "c1", "user:u1") // a prefix whose rules do not name notes
	notes := relationID(t, db, "notes")
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; INSERT INTO notes VALUES ('bad', 'o1', 'bypass'); COMMIT`)
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (2, 1, 'o1', 'after the poison')`)
	var q []quarantineRow
	eventually(t, 20*time.Second, "the quarantine", func() bool { q = quarantines(t, db); return len(q) == 1 })
	require.Equal(t, "fence_mismatch", q[0].Class)

	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, notes))
	op.activate(t)
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (3, 1, 'o1', 'after the unregister')`)
	require.NoError(t, op.exec(`SELECT synchro.retry_poison()`))
	eventually(t, 20*time.Second, "the retry's outcome", func() bool {
		qs := quarantines(t, db)
		return len(qs) == 1 && (qs[0].Resolved || qs[0].Attempts >= 2)
	})
	qs := quarantines(t, db)
	require.False(t, qs[0].Resolved, "the poisoned transaction was passed by an unregister")
	require.Equal(t, q[0].CommitLSN, qs[0].CommitLSN)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE pk IN ('bad', '2', '3')`))
	ch, _ := pullAll(t, db, "c1", "user:u1", cur, 100)
	require.Empty(t, ch)
}

// TestOperateEdgeReconfigureWhilePoisoned: an operator stages and activates a
// reconfiguration (set_columns: notes without body, a projection bootstrap) while the
// stream is blocked by a poison whose cause is outside the WAL, then repairs and
// retries (docs/runbook.md "Poison triage and retry", "Projection bootstrap and
// reconfiguration"). Every transaction is materialized once, in order, the bootstrap
// merges, and a rebuild of the reconfigured scope equals the live state in the new
// shape; writes of every phase arrive by pull.
func TestOperateEdgeReconfigureWhilePoisoned(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one'); INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o2', 't1');
		INSERT INTO project_members VALUES (1, 1, 'u1')`)
	_, curUser := startScope(t, db, "c1", "user:u1")
	mustExec(t, db, `
		CREATE FUNCTION public.review_refuse_t13() RETURNS trigger LANGUAGE plpgsql AS
		  $$ BEGIN IF NEW.pk = '13' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER review_refuse_t13 BEFORE INSERT ON synchro.effect
		  FOR EACH ROW EXECUTE FUNCTION public.review_refuse_t13();`)
	mustExec(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (13, 1, 'o2', 'poison')`)
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'o1', 'after the poison'); UPDATE tasks SET title = 'x' WHERE id = 1`)
	eventually(t, 20*time.Second, "the quarantine", func() bool { return len(quarantines(t, db)) == 1 })

	op := newOperator(t, db)
	mustExec(t, db, `GRANT SELECT ON notes TO synchro_operator`)
	notes := relationID(t, db, "notes")
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'owner']::name[])`, notes))
	g := op.activate(t)
	mustExec(t, db, `INSERT INTO notes VALUES ('n3', 'o1', 'after the activation'); INSERT INTO tasks (id, project_id, owner, title) VALUES (14, 1, 'o2', 'later')`)
	time.Sleep(500 * time.Millisecond) // the runner may stage the bootstrap while blocked
	require.Equal(t, 1, len(quarantines(t, db)))

	mustExec(t, db, `DROP TRIGGER review_refuse_t13 ON synchro.effect`)
	require.NoError(t, op.exec(`SELECT synchro.retry_poison()`))
	eventually(t, 30*time.Second, "the activation materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.progress WHERE registry_generation >= $1`, g) == 1
	}, func() { reviewOpDiag(t, db) })
	waitRegistry(t, db, g)
	eventually(t, 30*time.Second, "the later write", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '14'`) >= 1
	}, func() { reviewOpDiag(t, db) })
	qs := quarantines(t, db)
	require.Len(t, qs, 1)
	require.True(t, qs[0].Resolved)
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM (SELECT commit_lsn, event_ordinal FROM synchro.event GROUP BY 1, 2 HAVING count(*) > 1) x`))

	ch, _ := pullAll(t, db, "c1", "user:u1", curUser, 100)
	require.Equal(t, []string{"upsert:tasks/13", "upsert:tasks/1", "upsert:tasks/14"}, opsOf(ch))
	rep, _, _ := onePageRebuild(t, db, "c2", "owner:o1")
	require.Equal(t, []string{"notes/n1", "notes/n2", "notes/n3"}, sortedKeys(rep))
	for k, r := range rep {
		require.NotContains(t, r.Row, "body", k)
	}
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
}

// reviewOpDiag logs the stream's state: progress, quarantine, bootstraps, runner.
func reviewOpDiag(t *testing.T, db *testdb.DB) {
	t.Helper()
	for _, q := range []string{
		`SELECT row_to_json(p)::text FROM synchro.progress p`,
		`SELECT row_to_json(q)::text FROM synchro.quarantine q`,
		`SELECT row_to_json(b)::text FROM synchro.bootstrap_status b`,
		`SELECT row_to_json(r)::text FROM synchro.runner r`,
		`SELECT check_name || ' ' || ok || ' ' || detail FROM synchro.readiness()`,
	} {
		rows, err := db.Pool.Query(context.Background(), q)
		if err != nil {
			t.Logf("diag %s: %v", q, err)
			continue
		}
		for rows.Next() {
			var s string
			_ = rows.Scan(&s)
			t.Logf("diag: %s", s)
		}
		rows.Close()
	}
}

// TestOperateEdgeRebindUnderWriters: docs/runbook.md "A registered table dropped and
// recreated", followed literally (the swap in one transaction, rebind_relation, the
// activation retried until the runner passed the drop) while the application keeps
// writing the new table before, during and after the activation and its bootstrap.
// No poison; old cursors of the prefix stale (SY409); a rebuild equals the live state;
// pulls from its cursor converge to the live state after more writes.
func TestOperateEdgeRebindUnderWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes SELECT 'n' || i, CASE WHEN i % 2 = 0 THEN 'o1' ELSE 'o2' END, 'b' || i FROM generate_series(1, 40) i;
		INSERT INTO notes VALUES ('n50', 'o1', 'old table');
		INSERT INTO tasks (id, owner, title) VALUES (1, 'o1', 't1')`)
	before, cur := startScope(t, db, "c1", "owner:o1")
	oldVersion := before["notes/n50"].Version
	notes := relationID(t, db, "notes")

	mustExec(t, db, recreateNotes)
	w := startWriters(t, db, 2, 2*time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		owner := "o1"
		if i%3 == 0 {
			owner = "o2"
		}
		switch i % 4 {
		case 0:
			return `UPDATE notes SET body = 'u` + itoa(i) + `' WHERE id = 'n` + itoa(i%40+1) + `'`
		case 1:
			return `DELETE FROM notes WHERE id = 'w` + itoa(i%50) + `'`
		default:
			return `INSERT INTO notes VALUES ('w` + itoa(i%50) + `', '` + owner + `', 'i` + itoa(i) + `')
				ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, body = excluded.body`
		}
	})
	rebindActivated(t, db, notes, "public.notes")
	time.Sleep(300 * time.Millisecond)
	w.Stop()
	require.Greater(t, w.Attempts(), int64(20))
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'o1', 'marker')`)
	requireNoQuarantine(t, db)

	_, err := pullRaw(db, "c1", "owner:o1", cur, 100)
	requireSQLState(t, err, "SY409")
	// docs/sql/rebind_relation.md: "The old table's row versions are discarded; a
	// client's CAS with one fails as a conflict."
	require.NotEmpty(t, oldVersion)
	appConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer appConn.Close(ctx)
	_, err = appConn.Exec(ctx, `SET ROLE synchro_app`)
	require.NoError(t, err)
	raw, err := pushRawOn(ctx, appConn, "c1", pushJSON(t, pushUpd(pushID(), "notes", "n50", oldVersion, pm{"body": "cas with an old version"})))
	require.NoError(t, err)
	require.Contains(t, raw, `"conflict"`, raw)
	for _, scope := range []string{"owner:o1", "owner:o2"} {
		rep, _, cur2 := onePageRebuild(t, db, "c2", scope)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), rep, scope+" rebuilt after the rebind")
		write(t, db, `UPDATE notes SET body = 'after' WHERE id IN ('n1', 'n2'); INSERT INTO notes VALUES ('z', 'o1', 'z') ON CONFLICT (id) DO UPDATE SET body = 'z2'`)
		ch, _ := pullAll(t, db, "c2", scope, cur2, 100)
		rep.apply(t, ch)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), rep, scope+" pulled after the rebind")
	}
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	}, func() { reviewOpDiag(t, db) })
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestActivationLockTimeoutBoundsTheWait: an operator who set lock_timeout gets 55P03
// once the activation could not take every table's lock within it (the attempts retry
// until then), and nothing of the activation stays applied.
func TestActivationLockTimeoutBoundsTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `LOCK TABLE docs IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)

	require.NoError(t, op.exec(`SET lock_timeout = '400ms'`))
	err = op.exec(`SELECT synchro.activate_registry()`)
	requireSQLState(t, err, "55P03")
	require.NoError(t, op.exec(`RESET lock_timeout`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.registry_generation WHERE state = 'pending'`),
		"the generation is still staged")

	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, op.exec(`SELECT synchro.activate_registry()`))
}

// TestActivationLocksDoNotDeadlockWithWriters: activate_registry takes the locks of
// every table it alters at once or none (synchro._activation_lock_tables). It took each
// table's as it installed that table's triggers, in relation_id order: holding notes
// while it waited for docs, which a writer held, whose next write to notes then waited
// for the activation: a deadlock, 40P01 to one side (TestOperateEdgeReadinessDuringBootstrap
// failed so under load). Now the writer's transaction commits and the activation
// completes after it.
func TestActivationLocksDoNotDeadlockWithWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't1', 'doc' FROM generate_series(1, 10) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
	require.Less(t, relationID(t, db, "notes"), relationID(t, db, "docs"), "notes is locked first")

	writer, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer writer.Close(context.WithoutCancel(ctx))
	wtx, err := writer.Begin(ctx)
	require.NoError(t, err)
	_, err = wtx.Exec(ctx, `UPDATE docs SET body = 'held' WHERE id = 1`)
	require.NoError(t, err)

	activated := make(chan error, 1)
	go func() {
		var g int64
		activated <- op.conn.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&g)
	}()
	// The activation is waiting for docs (the writer's lock).
	eventually(t, 30*time.Second, "the activation running", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND query LIKE '%activate_registry()%' AND pid <> pg_backend_pid()`) == 1
	})
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-activated:
		t.Fatalf("the activation returned while a writer held docs: %v", err)
	default:
	}

	// The writer's next write, to notes, and its commit.
	_, err = wtx.Exec(ctx, `INSERT INTO notes VALUES ('n-deadlock', 'o1', 'x')`)
	require.NoError(t, err, "the writer's write to notes")
	require.NoError(t, wtx.Commit(ctx))
	select {
	case err := <-activated:
		require.NoError(t, err, "the activation")
	case <-time.After(60 * time.Second):
		t.Fatal("the activation did not complete after the writer committed")
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM notes WHERE id = 'n-deadlock'`))
}

// TestOperateEdgeReadinessDuringBootstrap (was a bug, fixed): docs/runbook.md "Projection bootstrap and
// reconfiguration", step 3: "Readiness stays ok throughout" a projection bootstrap
// (here: a table holding rows joins the running stream, then loses a column), with the
// application writing meanwhile. Every readiness sample taken from before the
// activation to after the merge is ready.
func TestOperateEdgeReadinessDuringBootstrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `CREATE TABLE docs (id int8 PRIMARY KEY, team text, body text);
		INSERT INTO docs SELECT i, 't' || (i % 5), repeat('x', 200) FROM generate_series(1, 20000) i;
		GRANT SELECT ON docs TO synchro_operator;`)
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one')`)
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
	w := startWriters(t, db, 1, 5*time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		return `UPDATE docs SET body = 'w` + itoa(i) + `' WHERE id = ` + itoa(i%20000+1) + `; INSERT INTO notes VALUES ('w` + itoa(i%100) + `', 'o1', 'x') ON CONFLICT (id) DO UPDATE SET body = excluded.body`
	})
	stop := make(chan struct{})
	var mu sync.Mutex
	var bad []string
	var samples int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rows, err := db.Pool.Query(ctx, `SELECT check_name || ': ' || detail FROM synchro.readiness() WHERE NOT ok`)
			if err == nil {
				fails, _ := pgx.CollectRows(rows, pgx.RowTo[string])
				mu.Lock()
				samples++
				bad = append(bad, fails...)
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('docs', 'docs')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team:', 'team')`))
	g := op.activate(t)
	waitRegistry(t, db, g)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'team']::name[])`, relationID(t, db, "docs")))
	g = op.activate(t)
	waitRegistry(t, db, g)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	<-done
	w.Stop()
	requireNoQuarantine(t, db)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d readiness samples", samples)
	var worker []string
	for _, b := range bad {
		if strings.HasPrefix(b, "worker:") {
			worker = append(worker, b)
		} else {
			t.Logf("another failing sample (TestOperateEdgeReadinessTornAcrossActivation): %s", b)
		}
	}
	require.Empty(t, worker, "readiness failed (worker) during a projection bootstrap: %d of %d samples", len(worker), samples)
}

// TestOperateEdgeReadinessTornAcrossActivation (was a bug, fixed): readiness compares the active
// registry with the publication, the triggers and the progress. An activation that
// commits while synchro.readiness() runs must not make a healthy stream read not
// ready (docs/runbook.md: "Readiness stays ok throughout" a reconfiguration; CONTRACT
// "Readiness": not ready only for missing, stale, inconsistent or unbounded data).
// Here: new empty tables join the stream one activation at a time (no bootstrap, the
// runner stays streaming) while readiness is sampled without pause.
func TestOperateEdgeReadinessTornAcrossActivation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one')`)
	eventually(t, 30*time.Second, "ready", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.readiness() WHERE NOT ok`) == 0
	})
	stop := make(chan struct{})
	var mu sync.Mutex
	var bad []string
	samples := 0
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rows, err := db.Pool.Query(ctx, `SELECT check_name || ': ' || detail FROM synchro.readiness()
					WHERE NOT ok AND check_name IN ('registry', 'triggers', 'publication')`)
				if err == nil {
					fails, _ := pgx.CollectRows(rows, pgx.RowTo[string])
					mu.Lock()
					samples++
					bad = append(bad, fails...)
					mu.Unlock()
				}
			}
		})
	}
	op := newOperator(t, db)
	for i := range 15 {
		name := "extra_" + itoa(int64(i))
		mustExec(t, db, `CREATE TABLE `+name+` (id int8 PRIMARY KEY, owner text); GRANT SELECT ON `+name+` TO synchro_operator`)
		require.NoError(t, op.exec(`SELECT synchro.register_table($1::regclass, $2)`, name, name))
		op.activate(t)
		time.Sleep(30 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	requireNoQuarantine(t, db)
	t.Logf("%d readiness samples", samples)
	require.Empty(t, bad, "a healthy stream read not ready across an activation")
}

// TestOperateEdgeOperatorSurfaceRefusedToConsumerAndApp: every operator function and
// view (registry, poison, reset, retention) refuses synchro_consumer and synchro_app
// with 42501 (docs/sql/*.md "Who may call it"; CONTRACT "Roles"), whatever the
// arguments, and nothing is staged; and synchro_operator may not call the runner's
// functions (runner_poison would forge or reopen a quarantine).
func TestOperateEdgeOperatorSurfaceRefusedToConsumerAndApp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, syncSchema+`
		CREATE TABLE docs (id int8 PRIMARY KEY, team text); GRANT ALL ON docs TO synchro_app, synchro_consumer;`)
	calls := []string{
		`SELECT synchro.register_table('docs', 'docs')`,
		`SELECT synchro.register_dependency('docs')`,
		`SELECT synchro.add_scope_rule('tasks', 'x:', 'title')`,
		`SELECT synchro.add_scope_rule('tasks', 'x:', 'project_id', 'project_members', 'project_id', 'user_id')`,
		`SELECT synchro.remove_scope_rules('tasks')`,
		`SELECT synchro.set_columns(1, NULL)`,
		`SELECT synchro.rebind_relation(1, 'docs')`,
		`SELECT synchro.unregister_relation(1)`,
		`SELECT synchro.set_scope_authorizer(NULL)`,
		`SELECT synchro.activate_registry()`,
		`SELECT synchro.retry_poison()`,
		`SELECT synchro.begin_reset('x')`,
		`SELECT synchro.compact('1 day')`,
		`SELECT * FROM synchro.registry`,
		`SELECT * FROM synchro.bootstrap_status`,
		`SELECT * FROM synchro.poison`,
	}
	for _, role := range []string{"synchro_consumer", "synchro_app"} {
		for _, call := range calls {
			requireSQLState(t, asRole(ctx, t, db, role, call), "42501")
		}
	}
	for _, call := range []string{
		`SELECT synchro.runner_poison(1, '0/1', 'x', NULL)`,
		`SELECT * FROM synchro.runner_state()`,
		`SELECT synchro.runner_idle('0/1')`,
		`SELECT * FROM synchro.quarantine`,
		`UPDATE synchro.quarantine SET retry_requested = true`,
	} {
		requireSQLState(t, asRole(ctx, t, db, "synchro_operator", call), "42501")
	}
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.registry_generation WHERE state = 'pending'`))
	// ready and readiness: application, operator and probes (consumer is also app).
	for _, role := range []string{"synchro_consumer", "synchro_app", "synchro_operator"} {
		require.NoError(t, asRole(ctx, t, db, role, `SELECT synchro.ready(), (SELECT count(*) FROM synchro.readiness())`))
	}
}

// TestOperateEdgePushDuringRebindWindow (was a bug, fixed): between a registered table's drop and
// recreate and the rebind's activation (readiness: relation_missing, the runbook's
// rebind procedure), an application keeps pushing to the table_id with every privilege
// on the new table. CONTRACT "Push": "rejected" is exactly a refusal "for a reason of
// this mutation" (classes 22, 23, 42501, P0001), recorded for ever (a retry of the same
// mutation id returns it byte for byte, and a client drops a rejected mutation); every
// other failure fails the whole call, writes and records nothing, "so the caller
// retries it". A registered relation that is gone is not a reason of the mutation:
// the push must not be recorded as rejected, and the same mutation retried after the
// rebind must be accepted and pull-visible. Messages carry no values.
func TestOperateEdgePushDuringRebindWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one')`)
	notes := relationID(t, db, "notes")
	mustExec(t, db, recreateNotes)
	appConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer appConn.Close(ctx)
	_, err = appConn.Exec(ctx, `SET ROLE synchro_app`)
	require.NoError(t, err)
	mutation := pushJSON(t, pushIns(pushID(), "notes", "secret-key-value", pm{"owner": "o1", "body": "secret-body-value"}))
	raw, err := pushRawOn(ctx, appConn, "pusher", mutation)
	t.Logf("push in the window: %s %v", raw, err)
	if err != nil {
		pe := asPgError(err)
		require.NotNil(t, pe, "%v", err)
		require.NotContains(t, pe.Message+pe.Detail+pe.Hint, "secret")
		require.NotEqual(t, "XX000", pe.Code, "an internal error: %s", pe.Message)
	}
	firstRejected := strings.Contains(raw, `"rejected"`)

	rebindActivated(t, db, notes, "public.notes")
	requireNoQuarantine(t, db)

	// The client retries the same mutation (it was not accepted).
	raw2, err := pushRawOn(ctx, appConn, "pusher", mutation)
	require.NoError(t, err)
	t.Logf("the same push after the rebind: %s", raw2)
	require.False(t, firstRejected, "a push to a registered table that was dropped and recreated was recorded as a per-mutation rejection: %s (retried after the rebind: %s)", raw, raw2)
	require.Contains(t, raw2, `"accepted"`)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (100, 'o9', 'marker')`)
	rep, _ := startScope(t, db, "pusher", "owner:o1")
	require.Contains(t, rep, "notes/secret-key-value")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:o1"), rep, "owner:o1 after the rebind")
}

// TestOperateEdgePushDuringRenameDrift: the runbook's other drift ("renamed → undo
// the DDL"). A push to the table_id while the registered table is renamed must fail
// the whole call (not a rejection of the mutation, CONTRACT "Push"), so the same
// mutation retried after the rename is undone is accepted and pull-visible.
func TestOperateEdgePushDuringRenameDrift(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one')`)
	mustExec(t, db, `GRANT ALL ON notes TO synchro_app; ALTER TABLE notes RENAME TO notes_x`)
	appConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer appConn.Close(ctx)
	_, err = appConn.Exec(ctx, `SET ROLE synchro_app`)
	require.NoError(t, err)
	mutation := pushJSON(t, pushIns(pushID(), "notes", "k2", pm{"owner": "o1", "body": "b"}))
	raw, err := pushRawOn(ctx, appConn, "pusher", mutation)
	t.Logf("push while renamed: %s %v", raw, err)
	require.NotContains(t, raw, `"rejected"`)
	mustExec(t, db, `ALTER TABLE notes_x RENAME TO notes`)
	raw2, err := pushRawOn(ctx, appConn, "pusher", mutation)
	require.NoError(t, err)
	require.Contains(t, raw2, `"accepted"`)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (100, 'o9', 'marker')`)
	requireNoQuarantine(t, db)
	rep, _ := startScope(t, db, "pusher", "owner:o1")
	require.Contains(t, rep, "notes/k2")
}

// reviewOpViaCollation: the via rule's text columns get a nondeterministic collation
// after the rule was staged (add_scope_rule refuses that pair: "nondeterministic
// collations would disagree with SQL equality and match nothing"). Neither readiness
// (drift) nor a later activation refuses it: either the rule is refused (SY400) or the
// membership follows the columns' equality.
func reviewOpViaCollation(t *testing.T) {
	ctx := context.Background()
	db := testdb.New(t)
	var icu int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_collation WHERE collprovider = 'i'`).Scan(&icu))
	if icu == 0 {
		t.Skip("no ICU collations")
	}
	mustExec(t, db, `
		CREATE COLLATION review_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
		CREATE TABLE members (id int8 PRIMARY KEY, team text NOT NULL, user_id text NOT NULL);
		CREATE TABLE docs (id int8 PRIMARY KEY, team text, title text);
		SELECT synchro.register_dependency('members', ARRAY['team', 'user_id']::name[]);
		SELECT synchro.register_table('docs', 'docs');
		SELECT synchro.add_scope_rule('docs', 'user:', 'team', 'members', 'team', 'user_id');
		SELECT synchro.activate_registry();
		INSERT INTO members VALUES (1, 'red', 'u1');
		INSERT INTO docs VALUES (1, 'red', 'd1');`)
	cfg := testRunnerConfig(t, db)
	startRunner(t, cfg)
	waitStream(t, db)
	// A rule staged now on this pair is refused (the documented rule).
	mustExec(t, db, `ALTER TABLE members ALTER COLUMN team TYPE text COLLATE review_ci;
		ALTER TABLE docs ALTER COLUMN team TYPE text COLLATE review_ci`)
	op := newOperator(t, db)
	mustExec(t, db, `GRANT SELECT ON docs, members TO synchro_operator`)
	requireSQLState(t, op.exec(`SELECT synchro.add_scope_rule('docs', 'team2:', 'team', 'members', 'team', 'user_id')`), "SY400")
	// Readiness calls it drift (rule_columns): the active rule compares the values'
	// text, and 'RED' = 'red' under the columns' collation is no match for it. It
	// called the registry ok until the fix (the column types are the same).
	var detail string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT ok::text || ' ' || detail FROM synchro.readiness() WHERE check_name = 'registry'`).Scan(&detail))
	require.True(t, strings.HasPrefix(detail, "false "), detail)
	require.Contains(t, detail, "rule_columns")
	// Undone, the registry is ok again.
	mustExec(t, db, `ALTER TABLE members ALTER COLUMN team TYPE text COLLATE "default";
		ALTER TABLE docs ALTER COLUMN team TYPE text COLLATE "default"`)
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT ok::text || ' ' || detail FROM synchro.readiness() WHERE check_name = 'registry'`).Scan(&detail))
	require.True(t, strings.HasPrefix(detail, "true "), detail)
}

// TestOperateEdgePushRacesUnregister (was a bug, fixed): a push resolved its table_id, then waits (here
// for its client's lock) while an operator's unregister_relation activation commits.
// CONTRACT "Push": "rejected" is a refusal of the database for a reason of this
// mutation (42501: the caller's privileges or row-level security); an unknown table_id
// is SY400 and fails the whole call. The push must not record a 42501 rejection that
// no privilege caused (the role may read and write the table).
func TestOperateEdgePushRacesUnregister(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO notes VALUES ('n1', 'o1', 'one')`)
	mustExec(t, db, `GRANT ALL ON notes TO synchro_app`)
	notes := relationID(t, db, "notes")

	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('synchro.client/' || 'racer', synchro._lock_seed()))`)
	require.NoError(t, err)

	appConn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer appConn.Close(ctx)
	_, err = appConn.Exec(ctx, `SET ROLE synchro_app`)
	require.NoError(t, err)
	mutation := pushJSON(t, pushIns(pushID(), "notes", "k9", pm{"owner": "o1", "body": "b"}))
	type res struct {
		raw string
		err error
	}
	done := make(chan res, 1)
	go func() {
		raw, err := pushRawOn(ctx, appConn, "racer", mutation)
		done <- res{raw, err}
	}()
	eventually(t, 20*time.Second, "the push to wait for its client's lock", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%synchro.push%'`) > 0
	})
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.unregister_relation($1)`, notes))
	op.activate(t)
	require.NoError(t, hold.Commit(ctx))
	r := <-done
	t.Logf("push across the unregister: %s %v", r.raw, r.err)
	require.NotContains(t, r.raw, `"insufficient_privilege"`, "a privilege rejection recorded for a role that holds every privilege")
	if r.err != nil {
		requireSQLState(t, r.err, "SY400")
	}
}

// rebindActivated stages rebind_relation(relationID, table) and activates it as the
// operator, retrying the activation while it is refused with SY400 (the runner has not
// processed the WAL up to the rebind yet), then waits for the runner to take the new
// generation.
func rebindActivated(t *testing.T, db *testdb.DB, relationID int64, table string) {
	t.Helper()
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.rebind_relation($1, $2::regclass)`, relationID, table))
	var g int64
	eventually(t, 60*time.Second, "activation accepted", func() bool {
		err := op.conn.QueryRow(context.Background(), `SELECT synchro.activate_registry()`).Scan(&g)
		if pe := asPgError(err); pe != nil && pe.Code == "SY400" {
			time.Sleep(50 * time.Millisecond)
			return false
		}
		require.NoError(t, err)
		return true
	})
	waitRegistry(t, db, g)
}

// recreateNotes drops and recreates the registered table notes with its rows, in one
// transaction, as docs/runbook.md's rebind procedure does (a new OID: readiness says
// relation_missing until the rebind is activated).
const recreateNotes = `BEGIN;
	CREATE TABLE notes_new (LIKE notes INCLUDING ALL);
	INSERT INTO notes_new SELECT * FROM notes;
	DROP TABLE notes;
	ALTER TABLE notes_new RENAME TO notes;
	GRANT SELECT ON notes TO synchro_operator;
	GRANT ALL ON notes TO synchro_app;
	COMMIT;`

package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Independent review of the read path (pull, rebuild, retention, authorizers, tokens).

// reviewDigestSchema: table docs (int8 keys) with columns a, b and one more whose name
// is "a;<relation_id>|b" (a legal quoted identifier), rows in scope "p:<value>" through
// the rules on a and b.
const reviewDigestSchema = `
CREATE TABLE docs (id int8 PRIMARY KEY, a text, b text);
DO $$
DECLARE nxt bigint; rid bigint;
BEGIN
  SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('synchro.relation', 'relation_id')), 0) + 1 INTO nxt;
  EXECUTE format('ALTER TABLE public.docs ADD COLUMN %I text', 'a;' || nxt || '|b');
  rid := synchro.register_table('docs', 'docs');
  IF rid <> nxt THEN RAISE EXCEPTION 'predicted relation_id % got %', nxt, rid; END IF;
END $$;
SELECT synchro.add_scope_rule('docs', 'p:', 'a');
SELECT synchro.add_scope_rule('docs', 'p:', 'b');
SELECT synchro.activate_registry();
INSERT INTO docs (id, a, b) VALUES (1, 'x', NULL);
INSERT INTO docs (id) VALUES (2);`

// A membership-rule change must make the prefix's cursors stale (CONTRACT.md "Registry":
// "Each scope prefix has a membership-rule generation that changes when a rule with that
// prefix changes: cursors and rebuild tokens of scopes with that prefix become stale
// (SY409), never reinterpreted"). The change was detected through a digest of the rules
// built with concat_ws('|', ...) and string_agg(..., ';'): not injective, since column
// names may hold '|' and ';'. Rules {docs.a, docs.b} and {docs."a;<rid>|b"} digested
// alike, and the change kept the cursors and the old membership (found by review).
// activate_registry now compares the rules themselves.
func TestRuleChangeWithSeparatorInColumnName(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, reviewDigestSchema)
	db := e.db
	rid := countOf(t, db, `SELECT relation_id FROM synchro.relation WHERE table_id = 'docs'`)
	weird := fmt.Sprintf("a;%d|b", rid)
	// Row 2 enters p:x only under the new rule (its weird column), row 1 leaves it.
	write(t, db, fmt.Sprintf(`UPDATE docs SET %q = 'x' WHERE id = 2`, weird))

	rep, cur := startScope(t, db, "dg", "p:x")
	require.ElementsMatch(t, []string{"docs/1"}, keysOf(rep))
	session := mustRebuildPage(t, db, "dg", "p:x", "", 1)
	digestBefore := textOf(t, db, `SELECT rules_digest FROM synchro.scope_prefix WHERE scope_prefix = 'p:'`)
	genBefore := countOf(t, db, `SELECT rule_generation FROM synchro.scope_prefix WHERE scope_prefix = 'p:'`)

	write(t, db, fmt.Sprintf(`SELECT synchro.remove_scope_rules('docs');
		SELECT synchro.add_scope_rule('docs', 'p:', %s);
		SELECT synchro.activate_registry();`, "'"+strings.ReplaceAll(weird, "'", "''")+"'"))
	// The rules did change.
	require.Equal(t, weird, textOf(t, db, `SELECT scope_rules->0->>'column_name' FROM synchro.registry WHERE table_id = 'docs'`))
	require.Equal(t, 1, countOf(t, db, `SELECT jsonb_array_length(scope_rules) FROM synchro.registry WHERE table_id = 'docs'`))
	t.Logf("digest before %s after %s; rule generation before %d after %d", digestBefore,
		textOf(t, db, `SELECT rules_digest FROM synchro.scope_prefix WHERE scope_prefix = 'p:'`), genBefore,
		countOf(t, db, `SELECT rule_generation FROM synchro.scope_prefix WHERE scope_prefix = 'p:'`))

	_, err := pullRaw(db, "dg", "p:x", cur, 10)
	_, errS := rebuildRaw(db, "dg", "p:x", session.Session, 1)
	// And the scope's state under the new rules (write waited for the activation's
	// materialization): row 2 only.
	rows, _ := fullRebuild(t, db, "dg", "p:x", 100)
	keys := rowKeys(rows)
	assert.Equal(t, []string{"docs/2"}, keys, "a rebuild serves the scope under the new rules")
	assert.Error(t, err, "pull with a cursor of the old rules: SY409 expected")
	assert.Error(t, errS, "rebuild session of the old rules: SY409 expected")
	requireSQLState(t, err, "SY409")
	requireSQLState(t, errS, "SY409")
}

// A page boundary inside the effects of one event, with a small byte budget and one
// image larger than the budget among them: one dependency insert brings 20 tasks into
// user:u in one event; every page holds 1 to max changes within the budget (the large
// one alone), nothing is skipped or repeated, and the order is the stored one.
func TestPullOversizedEffectInsideOneEvent(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, 1, 'o', repeat('t', 40 + g * 13) FROM generate_series(1, 20) g;
		UPDATE tasks SET title = repeat('X', 3000) WHERE id = 11;`)
	db := e.db
	const budget = 700
	setPageByteBudget(t, db, budget)
	rep, cur := startScope(t, db, "ob", "user:u")
	require.Empty(t, rep)
	write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u')`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(DISTINCT (commit_lsn, event_ordinal)) FROM synchro.effect WHERE scope = 'user:u'`))
	for _, max := range []int{1, 3, 7, 100} {
		t.Run(fmt.Sprintf("Max%d", max), func(t *testing.T) {
			all, pages, _ := pullPages(t, db, "ob", "user:u", cur, max)
			requireBudgetPages(t, pages, budget, max)
			seen := map[string]bool{}
			for _, c := range all {
				require.False(t, seen[c.key()], "duplicate %s", c.key())
				seen[c.key()] = true
			}
			require.Len(t, all, 20)
			for i, c := range all {
				require.Equal(t, fmt.Sprintf("upsert:tasks/%d", i+1), c.String(), "canonical order inside the event")
			}
			r := replica{}
			r.apply(t, all)
			requireReplica(t, liveScope(t, db, liveScopeSQL, "user:u"), r, "after paging one event")
		})
	}
}

// Scopes with unusual text: backslashes (the scope hash doubles them before decoding),
// quotes, unicode in two normal forms, spaces, and the longest scope pull accepts. Each
// scope serves exactly its rows, a cursor of one is refused (SY400) for its look-alike,
// and rebuild + pull track writes.
func TestScopeUnusualText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("ü", 506) // 'owner:' + 506 = 512 characters
	owners := []string{`a\b`, `a\\b`, `\101`, `a\`, `a'b`, "caf\u00e9", "cafe\u0301", " a ", "A", long}
	var vals []string
	for i, o := range owners {
		vals = append(vals, fmt.Sprintf("('n%d', %s, 'v%d')", i, "'"+strings.ReplaceAll(o, "'", "''")+"'", i))
	}
	e := newSyncEnv(t, `INSERT INTO notes (id, owner, body) VALUES `+strings.Join(vals, ", ")+`;`)
	db := e.db
	reps := map[string]replica{}
	curs := map[string]string{}
	for i, o := range owners {
		scope := "owner:" + o
		reps[o], curs[o] = startScope(t, db, "odd", scope)
		require.Equal(t, []string{fmt.Sprintf("notes/n%d", i)}, keysOf(reps[o]), "scope %q", scope)
	}
	// Look-alikes refuse each other's cursors.
	_, err := pullRaw(db, "odd", `owner:a\\b`, curs[`a\b`], 10)
	requireSQLState(t, err, "SY400")
	_, err = pullRaw(db, "odd", "owner:cafe\u0301", curs["caf\u00e9"], 10)
	requireSQLState(t, err, "SY400")
	_, err = pullRaw(db, "odd", "owner:a", curs["A"], 10)
	requireSQLState(t, err, "SY400")

	// Writes: an update of each, a new row in each, one row moved between look-alikes.
	var stmts []string
	for i, o := range owners {
		lit := "'" + strings.ReplaceAll(o, "'", "''") + "'"
		stmts = append(stmts, fmt.Sprintf(`UPDATE notes SET body = 'w%d' WHERE id = 'n%d';`, i, i))
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO notes (id, owner, body) VALUES ('m%d', %s, 'new');`, i, lit))
	}
	stmts = append(stmts, `UPDATE notes SET owner = 'a\\b' WHERE id = 'n0';`)
	write(t, db, strings.Join(stmts, "\n"))
	for _, o := range owners {
		scope := "owner:" + o
		changes, _ := pullAll(t, db, "odd", scope, curs[o], 1)
		reps[o].apply(t, changes)
		requireReplica(t, liveScope(t, db, liveScopeSQL, scope), reps[o], "scope "+scope)
	}
	// One character more than pull accepts: SY400, not a silent empty scope.
	_, err = rebuildRaw(db, "odd", "owner:"+long+"x", "", 10)
	requireSQLState(t, err, "SY400")
}

// Authorizers that return NULL (SY403), raise (their own error, no row values added),
// or return true for one client only; the checks come in the contract's order.
func TestAuthorizerNullAndRaise(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		CREATE FUNCTION public.authz(client_id text, scope text) RETURNS boolean LANGUAGE plpgsql
		SECURITY DEFINER SET search_path = pg_catalog, pg_temp
		AS $$ BEGIN
		  IF scope = 'owner:null' THEN RETURN NULL; END IF;
		  IF scope = 'owner:boom' THEN RAISE EXCEPTION 'authz failed' USING ERRCODE = 'P0001'; END IF;
		  RETURN client_id <> 'banned';
		END $$;
		ALTER FUNCTION public.authz(text, text) OWNER TO synchro_operator;
		SELECT synchro.set_scope_authorizer('public.authz(text, text)');
		INSERT INTO tasks (id, owner, title) VALUES (1, 'null', 'secret-title'), (2, 'boom', 'secret-title'), (3, 'a', 'x');`)
	db := e.db
	_, err := rebuildRaw(db, "c", "owner:null", "", 10)
	requireSQLState(t, err, "SY403")
	_, err = pullRaw(db, "c", "owner:null", "", 10)
	requireSQLState(t, err, "SY403")
	_, err = rebuildRaw(db, "c", "owner:boom", "", 10)
	pgErr := requireSQLState(t, err, "P0001")
	require.NotContains(t, pgErr.Message+pgErr.Detail+pgErr.Hint, "secret")
	_, cur := startScope(t, db, "c", "owner:a")
	_, err = pullRaw(db, "banned", "owner:a", cur, 10)
	requireSQLState(t, err, "SY403")
	// Clearing the authorizer lets the client in again; setting a NULL-returning one denies.
	mustExec(t, db, `SELECT synchro.set_scope_authorizer(NULL)`)
	_, err = pullRaw(db, "banned", "owner:a", cur, 10)
	require.NoError(t, err)
}

// A rebuild session whose P compaction passed: SY409 on the next page, and a new
// rebuild then completes and continues by pull (no SY409 loop). A cursor exactly at the
// horizon stays valid; one inside the newest compacted transaction is stale.
func TestRebuildSessionPassedByCompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) SELECT g, 'a', 't' || g FROM generate_series(1, 6) g;`)
	db := e.db
	write(t, db, `UPDATE tasks SET v = 1 WHERE id = 1`)
	first := mustRebuildPage(t, db, "rc", "owner:a", "", 2)
	require.True(t, first.HasMore)
	write(t, db, `UPDATE tasks SET v = 2 WHERE id = 5`)
	_, err := compactAll(ctx, db, "0")
	require.NoError(t, err)
	_, err = rebuildRaw(db, "rc", "owner:a", first.Session, 2)
	requireSQLState(t, err, "SY409")

	rows, last := fullRebuild(t, db, "rc", "owner:a", 2)
	rep := replica{}
	rep.applyRebuild(t, rows)
	// compact again: the horizon reaches P (the high-watermark), the cursor stays valid.
	_, err = compactAll(ctx, db, "0")
	require.NoError(t, err)
	p := mustPull(t, db, "rc", "owner:a", last.Cursor, 10)
	require.Empty(t, p.Changes)
	// A page that stops inside a transaction, then that transaction is compacted.
	write(t, db, `UPDATE tasks SET v = 3 WHERE id IN (1, 2, 3)`)
	p = mustPull(t, db, "rc", "owner:a", p.Cursor, 1)
	require.True(t, p.HasMore)
	rep.apply(t, p.Changes)
	_, err = compactAll(ctx, db, "0")
	require.NoError(t, err)
	_, err = pullRaw(db, "rc", "owner:a", p.Cursor, 10)
	requireSQLState(t, err, "SY409")
	rep, cur, rebuilt := pullOrRebuild(t, db, "rc", "owner:a", rep, p.Cursor)
	require.True(t, rebuilt)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), rep, "after the rebuild")
	write(t, db, `DELETE FROM tasks WHERE id = 4`)
	changes, _ := pullAll(t, db, "rc", "owner:a", cur, 10)
	require.Equal(t, []string{"delete:tasks/4"}, opsOf(changes))
}

// A row that leaves and re-enters a scope inside one transaction, and across
// transactions inside one pulled range, with pages of one change.
func TestPullLeaveAndReenter(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one'), (2, 'a', 'two');`)
	db := e.db
	repA, curA := startScope(t, db, "lr", "owner:a")
	repB, curB := startScope(t, db, "lr", "owner:b")
	write(t, db, `UPDATE tasks SET owner = 'b' WHERE id = 1; UPDATE tasks SET owner = 'a', title = 'back' WHERE id = 1`)
	write(t, db, `UPDATE tasks SET owner = 'b' WHERE id = 2`)
	write(t, db, `UPDATE tasks SET owner = 'a' WHERE id = 2`)
	chA, _ := pullAll(t, db, "lr", "owner:a", curA, 1)
	chB, _ := pullAll(t, db, "lr", "owner:b", curB, 1)
	require.Equal(t, []string{"upsert:tasks/1", "delete:tasks/2", "upsert:tasks/2"}, opsOf(chA))
	require.Equal(t, []string{"upsert:tasks/2", "delete:tasks/2"}, opsOf(chB))
	repA.apply(t, chA)
	repB.apply(t, chB)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), repA, "owner:a")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:b"), repB, "owner:b")
}

// Reading never writes (docs/sql/pull.md "Reading never advances anything on the
// server"): pull and rebuild work inside a READ ONLY transaction, and a cursor works for
// any client id.
func TestReadPathInReadOnlyTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one'), (2, 'a', 'two'), (3, 'a', 'three');`)
	db := e.db
	_, cur := startScope(t, db, "ro", "owner:a")
	write(t, db, `UPDATE tasks SET v = 5 WHERE id IN (1, 2)`)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET TRANSACTION READ ONLY`)
	require.NoError(t, err)
	var raw string
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.pull('another-client', 'owner:a', $1, 1)::text`, cur).Scan(&raw))
	require.Contains(t, raw, `"has_more": true`)
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.rebuild('ro', 'owner:a', NULL, 2)::text`).Scan(&raw))
	require.Contains(t, raw, `"has_more": true`)
}

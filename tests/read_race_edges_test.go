package tests

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// From the second independent review of the read path (2026-12-04): synchro.pull and synchro.rebuild, their
// tokens (sql/functions/_token*.sql, _cursor.sql), cursor validity across registry
// activations and retention, and both under real concurrent materialization. Every
// scenario is checked against CONTRACT.md ("Pull", "Rebuild", "Registry"), ADR 001
// (seeds/000) and docs/sql/pull.md, rebuild.md, add_scope_rule.md, activate_registry.md.
// Three found bugs, fixed since ("Was a bug": each was red first); the others are
// scenarios found sound, kept as regression tests.

const rr2Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// rr2Slack is the number of unused low bits of a base64url token's last character (0,
// 2 or 4): bits no decoder needs, which a lenient decoder ignores.
func rr2Slack(tok string) int {
	return len(tok)*6 - (len(tok)*6/8)*8
}

// rr2Tokens are pull cursors and rebuild sessions of scope owner:a of several payload
// lengths (generation_start, transaction_end, inside a transaction; sessions after keys
// of several lengths).
func rr2Tokens(t *testing.T, db *testdb.DB) (cursors, sessions []string) {
	t.Helper()
	_, cur := startScope(t, db, "tok", "owner:a")
	cursors = append(cursors, cur)
	write(t, db, `UPDATE notes SET body = body || '.' WHERE owner = 'a'`)
	c := cur
	for {
		p := mustPull(t, db, "tok", "owner:a", c, 1)
		cursors = append(cursors, p.Cursor)
		c = p.Cursor
		if !p.HasMore {
			break
		}
	}
	s := ""
	for {
		p := mustRebuildPage(t, db, "tok", "owner:a", s, 1)
		sessions = append(sessions, p.Session)
		if !p.HasMore {
			cursors = append(cursors, p.Cursor)
			break
		}
		s = p.Session
	}
	return cursors, sessions
}

const rr2TokenSchema = `INSERT INTO notes (id, owner, body) VALUES
	('k', 'a', 'one'), ('kk', 'a', 'two'), ('kkk', 'a', 'three'), ('kkkk', 'a', 'four'), ('kkkkk', 'a', 'five');`

// Was a bug (fixed; low severity). docs/sql/pull.md "Errors": SY400 when "the cursor is malformed,
// forged, tampered with, empty, or was issued for another scope"; docs/sql/rebuild.md the
// same for sessions; CONTRACT.md "Pull": "Malformed, forged or bound elsewhere: SY400".
// A token whose last character was changed in its unused low bits is a tampered token,
// yet it is accepted as the original: synchro._token_payload decodes with PostgreSQL's
// lenient base64 decoder, which ignores the trailing bits, and only then checks the
// MAC over the decoded bytes. Nothing is skipped (the bytes are the original's), but a
// token is no longer one string: up to 16 spellings of each cursor authenticate, so a
// client or proxy comparing or caching cursors as strings is misled, and the documented
// refusal does not hold. Fix: after decoding, require the canonical encoding, e.g.
// refuse unless rtrim(translate(encode(raw, 'base64'), E'+/\n', '-_'), '=') = token.
func TestReadEdgeTamperedTokenTrailingBits(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, rr2TokenSchema)
	db := e.db
	cursors, sessions := rr2Tokens(t, db)
	mutate := func(tok string) (string, bool) {
		if rr2Slack(tok) == 0 {
			return "", false
		}
		i := strings.IndexByte(rr2Alphabet, tok[len(tok)-1])
		require.GreaterOrEqual(t, i, 0)
		mut := tok[:len(tok)-1] + string(rr2Alphabet[i^1]) // the lowest bit is unused
		a, err := base64.RawURLEncoding.DecodeString(tok)
		require.NoError(t, err)
		b, err := base64.RawURLEncoding.DecodeString(mut)
		require.NoError(t, err)
		require.Equal(t, a, b, "the mutation only touches unused bits")
		require.NotEqual(t, tok, mut)
		return mut, true
	}
	var accepted []string
	nc, ns := 0, 0
	for _, c := range cursors {
		mut, ok := mutate(c)
		if !ok {
			continue
		}
		nc++
		if _, err := pullRaw(db, "tok", "owner:a", mut, 10); err == nil {
			accepted = append(accepted, "cursor "+cursorPayload(t, c))
		} else {
			requireSQLState(t, err, "SY400")
		}
	}
	for _, s := range sessions {
		mut, ok := mutate(s)
		if !ok {
			continue
		}
		ns++
		if _, err := rebuildRaw(db, "tok", "owner:a", mut, 1); err == nil {
			accepted = append(accepted, "session "+cursorPayload(t, s))
		} else {
			requireSQLState(t, err, "SY400")
		}
	}
	require.Positive(t, nc, "no cursor with unused bits among %d", len(cursors))
	require.Positive(t, ns, "no session with unused bits among %d", len(sessions))
	require.Empty(t, accepted, "tampered tokens (last character changed) were accepted instead of SY400")
}

// Every other single-character change, truncation and extension of a cursor or session
// is refused with SY400 (never another SQLSTATE such as 22P02/22023/XX000, never
// served), as is the token presented for a look-alike scope, with padding, or with
// whitespace. A cursor works for any client (CONTRACT.md: "not to a client") and pulls
// the same page.
func TestReadEdgeTokenMutationsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, rr2TokenSchema)
	db := e.db
	cursors, sessions := rr2Tokens(t, db)
	check := func(kind, tok, mut, scope string) {
		if mut == tok && scope == "owner:a" {
			return
		}
		var err error
		if kind == "cursor" {
			_, err = pullRaw(db, "tok", scope, mut, 10)
		} else {
			_, err = rebuildRaw(db, "tok", scope, mut, 1)
		}
		require.Error(t, err, "%s %q accepted as %q", kind, mut, tok)
		requireSQLState(t, err, "SY400")
	}
	all := map[string][]string{"cursor": cursors, "session": sessions}
	for kind, toks := range all {
		for _, tok := range toks {
			// Each position but the last (whose unused bits the test above covers).
			for i := 0; i < len(tok)-1; i++ {
				j := strings.IndexByte(rr2Alphabet, tok[i])
				check(kind, tok, tok[:i]+string(rr2Alphabet[(j+17)%64])+tok[i+1:], "owner:a")
			}
			for _, n := range []int{1, 2, 3, 4, 5, 8, 43, 44, 45, len(tok) - 33} {
				check(kind, tok, tok[:len(tok)-n], "owner:a")
			}
			for _, suffix := range []string{"A", "AA", "AAA", "AAAA", "=", "==", " ", "\n", "."} {
				check(kind, tok, tok+suffix, "owner:a")
			}
			check(kind, tok, " "+tok, "owner:a")
			check(kind, tok, strings.ReplaceAll(strings.ReplaceAll(tok, "-", "+"), "_", "/"), "owner:a")
			for _, other := range []string{"owner:A", "owner:a ", "owner:", "owner:aa", "owner:b"} {
				check(kind, tok, tok, other)
			}
		}
	}
	// Another kind of token of the same scope.
	for _, s := range sessions {
		check("cursor", "", s, "owner:a")
	}
	for _, c := range cursors {
		check("session", "", c, "owner:a")
	}
	// Any client: the same page, byte for byte.
	var a, b string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.pull('tok', 'owner:a', $1, 2)::text`, cursors[0]).Scan(&a))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.pull('someone-else', 'owner:a', $1, 2)::text`, cursors[0]).Scan(&b))
	require.Equal(t, a, b)
}

// Was a bug (fixed). CONTRACT.md "Registry": cursors of a prefix whose rules changed "become stale
// (SY409), never reinterpreted"; docs/sql/activate_registry.md: "Cursors and rebuild
// sessions of a changed prefix are stale (SY409) as soon as this transaction commits".
// synchro.pull checks the cursor's membership-rule generation in one statement and reads
// the high-watermark and the page in later statements (each with a new READ COMMITTED
// snapshot). A rule change that commits, and is materialized, in between is not seen by
// the check but is by the page: the stale cursor is served effects computed under the new
// rules, on top of a replica built under the old ones (the rows the re-evaluation moved
// in or out, which make no pull effects, are missing or left behind). The next pull says
// SY409, so the damage is a page of a state that never existed rather than a permanent
// divergence. Found by holding the pull right after the check (the retention read, on a
// lock of synchro.retention, which only compact, pull and rebuild touch).
// Fix: as for the retention horizon, read the scope's rule generation again in the page's
// own statement (same snapshot as the high-watermark or later) and answer SY409 when it
// moved; or read the high-watermark before the rule-generation check.
func TestReadEdgePullRacesRuleChange(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, reviewer, title) VALUES
		(1, 'u', NULL, 'mine'), (2, 'x', 'u', 'to review'), (3, 'x', NULL, 'other');`)
	db := e.db
	rep, cur := startScope(t, db, "rr", "owner:u")
	require.Equal(t, []string{"tasks/1"}, keysOf(rep))

	hp := heldPull(t, db, "synchro.retention", "rr", "owner:u", cur)
	// The pull passed its rule-generation check. The rule change commits and is
	// materialized (task 2 enters owner:u by re-evaluation, no pull effect); then task 3
	// enters owner:u under the new rule only.
	write(t, db, `SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer'); SELECT synchro.activate_registry();`)
	write(t, db, `UPDATE tasks SET reviewer = 'u' WHERE id = 3`)
	_, err := pullRaw(db, "rr", "owner:u", cur, 100)
	requireSQLState(t, err, "SY409") // a pull that starts now refuses the cursor
	r := hp.release(t)
	if r.err == nil {
		rep.apply(t, r.page.Changes)
		_, nextErr := pullRaw(db, "rr", "owner:u", r.page.Cursor, 100)
		t.Fatalf("a cursor stale since the rule change was served %v (has_more %v): the replica is then %v, "+
			"a state under neither rule set (live: tasks/1, tasks/2, tasks/3); its next pull: %v",
			opsOf(r.page.Changes), r.page.HasMore, keysOf(rep), nextErr)
	}
	requireSQLState(t, r.err, "SY409")
}

// Registry activations that do not change a prefix's rules keep its cursors and
// sessions valid (docs/sql/add_scope_rule.md: "Other prefixes are untouched"), and the
// pulls that continue across them lose nothing: a new table with its own prefix (empty
// at activation, so no bootstrap) activated in a transaction that also writes rows of
// the old prefix before and after the activation; an unused dependency; a table's rules
// removed and staged again identically.
func TestReadEdgeUnrelatedActivationsKeepCursors(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		CREATE TABLE labels (id int8 PRIMARY KEY, team text);
		CREATE TABLE audit (id int8 PRIMARY KEY, what text);
		INSERT INTO project_members VALUES (1, 1, 'u');
		INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'a', 'one'), (2, NULL, 'a', 'two'), (3, 1, 'b', 'three');
		INSERT INTO notes (id, owner, body) VALUES ('n1', 'a', 'note');`)
	db := e.db
	repA, curA := startScope(t, db, "un", "owner:a")
	repU, curU := startScope(t, db, "un", "user:u")
	session := mustRebuildPage(t, db, "un", "owner:a", "", 1)
	require.True(t, session.HasMore)
	sessionRows := append([]rebuildRow(nil), session.Rows...)

	write(t, db, `UPDATE tasks SET title = 'before' WHERE id = 1;
		SELECT synchro.register_table('labels', 'labels');
		SELECT synchro.add_scope_rule('labels', 'team:', 'team');
		SELECT synchro.activate_registry();
		UPDATE tasks SET title = 'after' WHERE id = 2;
		INSERT INTO labels VALUES (1, 't1');`)
	write(t, db, `SELECT synchro.register_dependency('audit'); SELECT synchro.activate_registry();
		INSERT INTO audit VALUES (1, 'x'); UPDATE tasks SET v = 9 WHERE id = 3;`)
	write(t, db, `SELECT synchro.remove_scope_rules('notes'); SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.activate_registry(); UPDATE notes SET body = 'edited' WHERE id = 'n1';`)

	changes, _ := pullAll(t, db, "un", "owner:a", curA, 1)
	require.Equal(t, []string{"upsert:tasks/1", "upsert:tasks/2", "upsert:notes/n1"}, opsOf(changes))
	repA.apply(t, changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), repA, "owner:a across three activations")
	changes, _ = pullAll(t, db, "un", "user:u", curU, 1)
	require.Equal(t, []string{"upsert:tasks/1", "upsert:tasks/3"}, opsOf(changes))
	repU.apply(t, changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "user:u"), repU, "user:u across three activations")

	// The session started before the activations finishes, and with its cursor converges.
	s := session.Session
	for {
		p := mustRebuildPage(t, db, "un", "owner:a", s, 1)
		sessionRows = append(sessionRows, p.Rows...)
		if !p.HasMore {
			require.Equal(t, chainChecksum(sessionRows), p.Checksum)
			r := replica{}
			r.applyRebuild(t, sessionRows)
			changes, _ := pullAll(t, db, "un", "owner:a", p.Cursor, 2)
			r.apply(t, changes)
			requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), r, "a session across activations")
			break
		}
		s = p.Session
	}
	// The new prefix serves its table.
	rows, _ := fullRebuild(t, db, "un", "team:t1", 10)
	require.Equal(t, []string{"labels/1"}, rowKeys(rows))
}

// Was a bug (fixed; low severity: a needless rebuild of every client of the prefix). docs/sql/
// add_scope_rule.md: "An activation that changes the set of rules of a prefix gives it a
// new one [membership-rule generation] ... Other prefixes are untouched"; CONTRACT.md: a
// row's scopes are "the union of its table's rules", so the order in which rules were
// staged means nothing. activate_registry compares each prefix's rules as a jsonb array
// ordered by (relation_id, rule_no), and rule_no is the staging order: staging the same
// set again in another order (remove_scope_rules, then add_scope_rule in a different
// order, as a migration rewritten by hand does) gives the prefix a new generation and
// makes every cursor and session of it SY409 (LESSONS.md: Electric's and PowerSync's
// needless must-refetch loops). Fix: order each rule array by the rule's values, not by
// rule_no (e.g. ORDER BY relation_id, column_name, via_relation_id, via_match,
// via_scope).
func TestReadEdgeSameRuleSetReorderedKeepsCursors(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `
		SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer');
		SELECT synchro.activate_registry();
		INSERT INTO tasks (id, owner, reviewer, title) VALUES (1, 'a', NULL, 'one'), (2, 'x', 'a', 'two');`)
	db := e.db
	rep, cur := startScope(t, db, "ro", "owner:a")
	require.Equal(t, []string{"tasks/1", "tasks/2"}, keysOf(rep))
	_, curU := startScope(t, db, "ro", "user:u")
	before := textOf(t, db, `SELECT scope_rules::text FROM synchro.registry WHERE table_id = 'tasks'`)
	// The same three rules, staged in another order.
	write(t, db, `SELECT synchro.remove_scope_rules('tasks');
		SELECT synchro.add_scope_rule('tasks', 'owner:', 'reviewer');
		SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'project_members', 'project_id', 'user_id');
		SELECT synchro.add_scope_rule('tasks', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		UPDATE tasks SET v = 1 WHERE id = 1;`)
	t.Logf("rules before %s after %s", before, textOf(t, db, `SELECT scope_rules::text FROM synchro.registry WHERE table_id = 'tasks'`))
	_, err := pullRaw(db, "ro", "user:u", curU, 10)
	require.NoError(t, err, "user: (its one rule staged again) keeps its cursors")
	changes, err := pullRaw(db, "ro", "owner:a", cur, 10)
	require.NoError(t, err, "owner: has the same set of rules: its cursors must stay valid")
	require.Equal(t, []string{"upsert:tasks/1"}, opsOf(changes.Changes))
}

// rr2KeysSchema: four tables whose keys are int4, int8, varchar and uuid, in scopes
// "o:<owner>", with extreme and unusual keys; rows also in another scope.
const rr2KeysSchema = `
CREATE TABLE k4 (id int4 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0);
CREATE TABLE k8 (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0);
CREATE TABLE ks (id varchar(40) PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0);
CREATE TABLE ku (id uuid PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0);
SELECT synchro.register_table('k4', 'k4');
SELECT synchro.register_table('k8', 'k8');
SELECT synchro.register_table('ks', 'ks');
SELECT synchro.register_table('ku', 'ku');
SELECT synchro.add_scope_rule('k4', 'o:', 'owner');
SELECT synchro.add_scope_rule('k8', 'o:', 'owner');
SELECT synchro.add_scope_rule('ks', 'o:', 'owner');
SELECT synchro.add_scope_rule('ku', 'o:', 'owner');
SELECT synchro.activate_registry();
INSERT INTO k4 (id, owner) VALUES (2147483647, 'o'), (-2147483648, 'o'), (0, 'o'), (-1, 'o'), (7, 'p');
INSERT INTO k8 (id, owner) VALUES (9223372036854775807, 'o'), (-9223372036854775808, 'o'), (9007199254740993, 'o'), (-9007199254740993, 'o');
INSERT INTO ks (id, owner) VALUES ('Z', 'o'), ('a', 'o'), ('ä', 'o'), ('𝄞', 'o'), (' lead', 'o'), ('x\y', 'o'), ('q', 'p');
INSERT INTO ku (id, owner) VALUES ('A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'o'), ('00000000-0000-0000-0000-000000000000', 'o'),
  ('ffffffff-ffff-ffff-ffff-ffffffffffff', 'o');`

const rr2KeysLiveSQL = `
SELECT 'k4', x.id::text, rv.version, to_jsonb(x)::text FROM k4 x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'k4') AND rv.pk = x.id::text WHERE 'o:' || x.owner = $1
UNION ALL
SELECT 'k8', x.id::text, rv.version, to_jsonb(x)::text FROM k8 x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'k8') AND rv.pk = x.id::text WHERE 'o:' || x.owner = $1
UNION ALL
SELECT 'ks', x.id::text, rv.version, to_jsonb(x)::text FROM ks x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'ks') AND rv.pk = x.id::text WHERE 'o:' || x.owner = $1
UNION ALL
SELECT 'ku', x.id::text, rv.version, to_jsonb(x)::text FROM ku x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'ku') AND rv.pk = x.id::text WHERE 'o:' || x.owner = $1`

// The checksum covers every delivered row in delivery order, whatever the page size
// (CONTRACT.md "Rebuild": the chain over (table, key text, version)), with int4 and int8
// extremes (keys beyond 2^53 exact as JSON numbers), bytewise string order over
// multibyte and astral characters, and uuids in lowercase canonical form (inserted in
// uppercase); it changes when one row's version changes, when a row leaves and when one
// enters; rebuild plus pull from its cursor equals the live scope.
func TestReadEdgeChecksumAndKeyOrder(t *testing.T) {
	t.Parallel()
	e := newSyncEnvSchema(t, rr2KeysSchema)
	db := e.db
	// Rows through the WAL too (materialized projections, not only the baseline).
	write(t, db, `INSERT INTO k8 (id, owner) VALUES (5, 'o'); INSERT INTO ku (id, owner) VALUES ('B0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', 'o');
		INSERT INTO ks (id, owner) VALUES ('~', 'o')`)
	want := []string{
		"k4/-2147483648", "k4/-1", "k4/0", "k4/2147483647",
		"k8/-9223372036854775808", "k8/-9007199254740993", "k8/5", "k8/9007199254740993", "k8/9223372036854775807",
		"ks/ lead", "ks/Z", "ks/a", "ks/x\\y", "ks/~", "ks/ä", "ks/𝄞",
		"ku/00000000-0000-0000-0000-000000000000", "ku/a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"ku/b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "ku/ffffffff-ffff-ffff-ffff-ffffffffffff",
	}
	var sum string
	for _, size := range []int{1, 2, 3, 7, 19, 20, 1000} {
		rows, last := fullRebuild(t, db, "ck", "o:o", size)
		require.Equal(t, want, rowKeys(rows), "page size %d", size)
		require.Equal(t, chainChecksum(rows), last.Checksum, "page size %d", size)
		if sum == "" {
			sum = last.Checksum
		}
		require.Equal(t, sum, last.Checksum, "the checksum does not depend on the page size")
		require.Equal(t, "9007199254740993", string(rows[7].PK), "an int8 key beyond 2^53 is exact")
		require.Equal(t, `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`, string(rows[17].PK))
	}
	rows, last := fullRebuild(t, db, "ck", "o:o", 4)
	rep := replica{}
	rep.applyRebuild(t, rows)
	requireReplica(t, liveScope(t, db, rr2KeysLiveSQL, "o:o"), rep, "the rebuild")
	cur := last.Cursor

	step := func(what, sql string) {
		write(t, db, sql)
		rows, last := fullRebuild(t, db, "ck", "o:o", 3)
		require.Equal(t, chainChecksum(rows), last.Checksum, what)
		require.NotEqual(t, sum, last.Checksum, "%s: the checksum must change", what)
		sum = last.Checksum
		changes, next := pullAll(t, db, "ck", "o:o", cur, 2)
		rep.apply(t, changes)
		cur = next
		requireReplica(t, liveScope(t, db, rr2KeysLiveSQL, "o:o"), rep, what)
		r := replica{}
		r.applyRebuild(t, rows)
		requireReplica(t, rep, r, what+": rebuild equals the pulled replica")
	}
	step("a no-op update of one row (new version)", `UPDATE k4 SET v = v WHERE id = 0`)
	step("the last row changes", `UPDATE ku SET v = 1 WHERE id = 'ffffffff-ffff-ffff-ffff-ffffffffffff'`)
	step("a row leaves", `UPDATE k8 SET owner = 'p' WHERE id = -9223372036854775808`)
	step("a row enters", `UPDATE k4 SET owner = 'o' WHERE id = 7`)
	step("a row leaves and comes back with a new version", `UPDATE ks SET owner = 'p' WHERE id = 'a'; UPDATE ks SET owner = 'o' WHERE id = 'a'`)
	changes, _ := pullAll(t, db, "ck", "o:o", cur, 10)
	require.Empty(t, changes)
}

// A scope larger than the largest page: 10,001 rows. Rebuild with max_rows 10000 is a
// full page and a page of one, with the checksum of all; one transaction updating every
// row is pulled in pages of 10000 and 1 (the second stops inside the transaction's
// effects) and converges.
func TestReadEdgeLargeScope(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO notes (id, owner, body) SELECT 'n' || g, 'big', 'b' FROM generate_series(1, 10001) g;`)
	db := e.db
	p := mustRebuildPage(t, db, "big", "owner:big", "", 10000)
	require.True(t, p.HasMore)
	rows := append([]rebuildRow(nil), p.Rows...)
	q := mustRebuildPage(t, db, "big", "owner:big", p.Session, 10000)
	require.False(t, q.HasMore)
	require.Len(t, q.Rows, 1)
	rows = append(rows, q.Rows...)
	require.Equal(t, chainChecksum(rows), q.Checksum)
	rep := replica{}
	rep.applyRebuild(t, rows)
	require.Len(t, rep, 10001)

	write(t, db, `UPDATE notes SET body = 'c' WHERE owner = 'big'`)
	a := mustPull(t, db, "big", "owner:big", q.Cursor, 10000)
	require.True(t, a.HasMore)
	require.Len(t, a.Changes, 10000)
	require.Contains(t, cursorPayload(t, a.Cursor), ":e.", "the page stopped inside the transaction")
	b := mustPull(t, db, "big", "owner:big", a.Cursor, 10000)
	require.False(t, b.HasMore)
	require.Len(t, b.Changes, 1)
	rep.apply(t, a.Changes)
	rep.apply(t, b.Changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:big"), rep, "10,001 rows")
}

// rr2Writer runs n random source transactions of 1 to 3 statements on tasks with keys
// base+1..base+30 (owner c or d, project 1 to 3) and, for writer 0, on project_members
// (user m in projects 1 to 3): inserts, updates, moves between scopes, deletes.
func rr2Writer(ctx context.Context, db *testdb.DB, w, n int) error {
	rnd := rand.New(rand.NewSource(int64(w) + 42))
	base := (w + 1) * 1000
	for i := 0; i < n; i++ {
		var stmts []string
		for k := 0; k < 1+rnd.Intn(3); k++ {
			id := base + 1 + rnd.Intn(30)
			switch op := rnd.Intn(7); {
			case op == 0 || op == 1:
				stmts = append(stmts, fmt.Sprintf(`INSERT INTO tasks (id, project_id, owner, title) VALUES (%d, %d, '%s', 'i%d')
					ON CONFLICT (id) DO UPDATE SET title = excluded.title, owner = excluded.owner`,
					id, 1+rnd.Intn(3), []string{"c", "d"}[rnd.Intn(2)], i))
			case op == 2:
				stmts = append(stmts, fmt.Sprintf(`UPDATE tasks SET v = v + 1 WHERE id = %d`, id))
			case op == 3:
				stmts = append(stmts, fmt.Sprintf(`UPDATE tasks SET owner = CASE owner WHEN 'c' THEN 'd' ELSE 'c' END WHERE id = %d`, id))
			case op == 4:
				stmts = append(stmts, fmt.Sprintf(`DELETE FROM tasks WHERE id = %d`, id))
			case op == 5:
				stmts = append(stmts, fmt.Sprintf(`UPDATE tasks SET project_id = %d WHERE id = %d`, 1+rnd.Intn(3), id))
			case w == 0:
				p := 1 + rnd.Intn(3)
				if rnd.Intn(2) == 0 {
					stmts = append(stmts, fmt.Sprintf(`INSERT INTO project_members VALUES (%d, %d, 'm') ON CONFLICT DO NOTHING`, p, p))
				} else {
					stmts = append(stmts, fmt.Sprintf(`DELETE FROM project_members WHERE id = %d`, p))
				}
			default:
				stmts = append(stmts, fmt.Sprintf(`UPDATE tasks SET title = 'u%d' WHERE id = %d`, i, id))
			}
		}
		if _, err := db.Pool.Exec(ctx, strings.Join(stmts, ";\n")); err != nil {
			return err
		}
		time.Sleep(time.Duration(rnd.Intn(4)) * time.Millisecond) // spread the writes over the reads
	}
	return nil
}

// Rebuilds taken while two writers commit (the runner materializing with its two
// pipelined apply sessions), in small pages whose sessions span many materialized
// batches, each followed by catch-up pulls in pages of two: every session's checksum is
// the chain of what it delivered, and every replica, pulled to the end once the writers
// stopped, equals the live scope exactly (CONTRACT.md "Rebuild": "Pulling from it after
// applying every page yields exactly the scope's current state"), for a direct scope and
// a via scope whose membership the dependency changes move.
func TestReadEdgeRebuildDuringWritesConverges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, `
		INSERT INTO project_members VALUES (1, 1, 'm');
		INSERT INTO tasks (id, project_id, owner, title) SELECT 1000 + g, 1 + g % 3, 'c', 'b' FROM generate_series(1, 30) g;
		INSERT INTO tasks (id, project_id, owner, title) SELECT 2000 + g, 1 + g % 3, 'd', 'b' FROM generate_series(1, 30) g;`)
	db := e.db
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- rr2Writer(ctx, db, w, 120)
		}(w)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	type client struct {
		scope string
		rep   replica
		cur   string
	}
	var clients []*client
	spanning := 0 // sessions during which the high-watermark moved
	hw := func() string {
		return textOf(t, db, `SELECT coalesce(materialized_commit_lsn::text, '') FROM synchro.progress`)
	}
	rebuild := func(scope string, size int) *client {
		var rows []rebuildRow
		s := ""
		start := hw()
		for {
			p := mustRebuildPage(t, db, "rw", scope, s, size)
			rows = append(rows, p.Rows...)
			if !p.HasMore {
				if hw() != start {
					spanning++
				}
				require.Equal(t, chainChecksum(rows), p.Checksum, "the checksum of the rows delivered")
				r := replica{}
				r.applyRebuild(t, rows)
				return &client{scope, r, p.Cursor}
			}
			s = p.Session
			time.Sleep(2 * time.Millisecond) // let batches land between pages
		}
	}
	running := true
	for round := 0; running; round++ {
		select {
		case <-finished:
			running = false
		default:
		}
		if round < 8 {
			clients = append(clients, rebuild("owner:c", 2+round%2), rebuild("user:m", 3))
		}
		for _, c := range clients {
			changes, next := pullAll(t, db, "rw", c.scope, c.cur, 2)
			c.rep.apply(t, changes)
			c.cur = next
		}
	}
	for w := 0; w < 2; w++ {
		require.NoError(t, <-errs)
	}
	// A marker after every writer's commit: once it is materialized, so is everything.
	write(t, db, `INSERT INTO notes (id, owner, body) VALUES ('marker', 'z', 'z')`)
	for i, c := range clients {
		changes, _ := pullAll(t, db, "rw", c.scope, c.cur, 2)
		c.rep.apply(t, changes)
		requireReplica(t, liveScope(t, db, liveScopeSQL, c.scope), c.rep, fmt.Sprintf("client %d (%s)", i, c.scope))
	}
	t.Logf("%d clients converged; the high-watermark moved during %d of their rebuild sessions", len(clients), spanning)
}

// Pull against concurrent materialization: two writers insert three rows per source
// transaction (so pages of one and two stop inside transactions) while the runner
// materializes with two pipelined apply sessions; a client pulls to the end again and
// again. Rows are only inserted, so (a) every row arrives exactly once over all pages
// (no replay, no skip across page boundaries inside events and transactions), and (b)
// after each pull that ends (has_more false, cursor at the high-watermark H) every row
// whose insert committed at or below H has arrived: a pull that saw a later
// materialization batch but not an earlier one would leave it behind for good.
func TestReadEdgePullDuringPipelinedMaterialization(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	const perWriter = 60
	var mu sync.Mutex
	committed := map[string]pglogrepl.LSN{}
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			for i := 0; i < perWriter; i++ {
				id := (w+1)*100000 + i*3
				if _, err := conn.Exec(ctx, `INSERT INTO tasks (id, owner, title) VALUES ($1::int8, 'pp', 'a'), ($1::int8 + 1, 'pp', 'b'), ($1::int8 + 2, 'pp', 'c')`, id); err != nil {
					errs <- err
					return
				}
				var s string
				if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
					errs <- err
					return
				}
				l, err := pglogrepl.ParseLSN(s)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for k := 0; k < 3; k++ {
					committed[fmt.Sprintf("tasks/%d", id+k)] = l
				}
				mu.Unlock()
			}
			errs <- nil
		}(w)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	_, cur := startScope(t, db, "pp", "owner:pp")
	seen := map[string]int{}
	pulls := 0
	pullToEnd := func(max int) {
		for {
			p := mustPull(t, db, "pp", "owner:pp", cur, max)
			for _, c := range p.Changes {
				require.Equal(t, "upsert", c.Op)
				seen[c.key()]++
				require.Equal(t, 1, seen[c.key()], "%s delivered twice", c.key())
			}
			cur = p.Cursor
			if !p.HasMore {
				break
			}
		}
		pulls++
		payload := cursorPayload(t, cur)
		i := strings.LastIndex(payload, ":t.")
		if i < 0 {
			return // generation_start: nothing materialized yet
		}
		h, err := pglogrepl.ParseLSN(payload[i+3:])
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for k, l := range committed {
			if l <= h {
				require.Equal(t, 1, seen[k], "%s committed at or below the high-watermark %s but never arrived", k, h)
			}
		}
	}
	for running := true; running; {
		select {
		case <-finished:
			running = false
		default:
		}
		pullToEnd(1 + pulls%2)
	}
	for w := 0; w < 2; w++ {
		require.NoError(t, <-errs)
	}
	eventually(t, 10*time.Second, "every insert", func() bool {
		pullToEnd(2)
		return len(seen) == 2*perWriter*3
	})
	t.Logf("%d pulls to the end", pulls)
}

// A session whose remaining rows all leave the scope between pages: the next page is
// empty and last (has_more false), its checksum is the chain of the rows delivered
// before, and the catch-up pull removes them: the replica ends empty like the scope.
func TestReadEdgeRebuildScopeEmptiedBetweenPages(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO tasks (id, owner, title) SELECT g, 'e', 't' FROM generate_series(1, 5) g;`)
	db := e.db
	p := mustRebuildPage(t, db, "em", "owner:e", "", 2)
	require.True(t, p.HasMore)
	rows := append([]rebuildRow(nil), p.Rows...)
	write(t, db, `UPDATE tasks SET owner = 'f' WHERE owner = 'e'`)
	q := mustRebuildPage(t, db, "em", "owner:e", p.Session, 2)
	require.False(t, q.HasMore)
	require.Empty(t, q.Rows)
	require.Equal(t, chainChecksum(rows), q.Checksum)
	rep := replica{}
	rep.applyRebuild(t, rows)
	changes, _ := pullAll(t, db, "em", "owner:e", q.Cursor, 10)
	rep.apply(t, changes)
	require.Empty(t, rep)
	require.Empty(t, liveScope(t, db, liveScopeSQL, "owner:e"))
}

// A scope of 511 characters, most of them astral (4 bytes each, 2,026 bytes in all), and
// a colon-laden value: rebuild, pull and paging work, and a cursor of one is refused for
// the other.
func TestReadEdgeLongAstralScope(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("\U0001D11E", 505)
	e := newSyncEnv(t, fmt.Sprintf(`INSERT INTO notes (id, owner, body) VALUES ('n1', '%s', 'x'), ('n2', 'a:b:c', 'y');`, long))
	db := e.db
	rep, cur := startScope(t, db, "as", "owner:"+long)
	require.Equal(t, []string{"notes/n1"}, keysOf(rep))
	rep2, cur2 := startScope(t, db, "as", "owner:a:b:c")
	require.Equal(t, []string{"notes/n2"}, keysOf(rep2))
	write(t, db, fmt.Sprintf(`UPDATE notes SET body = 'z'; INSERT INTO notes VALUES ('n3', '%s', 'w')`, long))
	changes, _ := pullAll(t, db, "as", "owner:"+long, cur, 1)
	require.Equal(t, []string{"upsert:notes/n1", "upsert:notes/n3"}, opsOf(changes))
	rep.apply(t, changes)
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:"+long), rep, "the long scope")
	_, err := pullRaw(db, "as", "owner:"+long, cur2, 1)
	requireSQLState(t, err, "SY400")
	_, err = pullRaw(db, "as", "owner:a:b", cur2, 1)
	requireSQLState(t, err, "SY400")
}

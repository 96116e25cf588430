package tests

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Rebuild (CONTRACT.md "Rebuild"), with the runner running in-process.

// rebuildSchema: two tables in scope "owner:<owner>": table_id "t_b" with int8 keys and
// "ta" with text keys. Bytewise "t_b" < "ta" ('_' is 0x5F, 'a' 0x61), while a
// linguistic collation ignores the underscore and sorts "ta" first.
const rebuildSchema = `
CREATE TABLE tb (id int8 PRIMARY KEY, owner text, body text);
CREATE TABLE ta (id text PRIMARY KEY, owner text, body text);
SELECT synchro.register_table('ta', 'ta');
SELECT synchro.register_table('tb', 't_b');
SELECT synchro.add_scope_rule('ta', 'owner:', 'owner');
SELECT synchro.add_scope_rule('t_b', 'owner:', 'owner');
SELECT synchro.activate_registry();
INSERT INTO tb (id, owner, body) VALUES (10, 'o', 'ten'), (2, 'o', 'two'), (-5, 'o', 'minus five'),
  (1, 'o', 'one'), (100, 'o', 'hundred'), (9, 'o', 'nine'), (7, 'other', 'not mine');
INSERT INTO ta (id, owner, body) VALUES ('b', 'o', 'b'), ('B', 'o', 'B'), ('a', 'o', 'a'), ('_x', 'o', 'x'),
  ('a1', 'o', 'a1'), ('A', 'o', 'A'), ('é', 'o', 'e acute'), ('~', 'o', 'tilde'), ('q', 'other', 'not mine');`

const rebuildLiveSQL = `
SELECT 't_b', x.id::text, rv.version, to_jsonb(x)::text
  FROM tb x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 't_b') AND rv.pk = x.id::text
 WHERE 'owner:' || x.owner = $1
UNION ALL
SELECT 'ta', x.id, rv.version, to_jsonb(x)::text
  FROM ta x JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'ta') AND rv.pk = x.id
 WHERE 'owner:' || x.owner = $1`

// newRebuildEnv: the baseline rows above, then rows 3, 20, 'Z' and 'c' through the WAL.
func newRebuildEnv(t *testing.T) *syncEnv {
	t.Helper()
	e := newSyncEnvSchema(t, rebuildSchema)
	write(t, e.db, `INSERT INTO tb (id, owner, body) VALUES (3, 'o', 'three'), (20, 'o', 'twenty');
		INSERT INTO ta (id, owner, body) VALUES ('Z', 'o', 'Z'), ('c', 'o', 'c')`)
	return e
}

// chainChecksum is CONTRACT.md's checksum, computed independently: h0 is 32 zero bytes;
// h = SHA-256(h || table || 0x00 || key text || 0x00 || version || 0x0A).
func chainChecksum(rows []rebuildRow) string {
	h := make([]byte, 32)
	for _, r := range rows {
		s := sha256.New()
		s.Write(h)
		s.Write([]byte(r.Table))
		s.Write([]byte{0})
		s.Write([]byte(pkText(r.PK)))
		s.Write([]byte{0})
		s.Write([]byte(r.Version))
		s.Write([]byte{'\n'})
		h = s.Sum(nil)
	}
	return hex.EncodeToString(h)
}

func rowKeys(rows []rebuildRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.key())
	}
	return out
}

var rebuildOrder = []string{
	"t_b/-5", "t_b/1", "t_b/2", "t_b/3", "t_b/9", "t_b/10", "t_b/20", "t_b/100",
	"ta/A", "ta/B", "ta/Z", "ta/_x", "ta/a", "ta/a1", "ta/b", "ta/c", "ta/~", "ta/é",
}

func TestRebuildOrderAndChecksum(t *testing.T) {
	t.Parallel()
	e := newRebuildEnv(t)
	db := e.db
	live := liveScope(t, db, rebuildLiveSQL, "owner:o")
	require.Len(t, live, len(rebuildOrder))

	for _, pageSize := range []int{1, 3, 6, 7, 18, 19, 1000} {
		t.Run(fmt.Sprintf("Pages%d", pageSize), func(t *testing.T) {
			var rows []rebuildRow
			session := ""
			pages := 0
			for {
				p := mustRebuildPage(t, db, "rb", "owner:o", session, pageSize)
				pages++
				rows = append(rows, p.Rows...)
				session = p.Session
				if !p.HasMore {
					require.Equal(t, chainChecksum(rows), p.Checksum)
					break
				}
			}
			require.Equal(t, rebuildOrder, rowKeys(rows), "table_id bytewise, then numeric or bytewise key")
			require.Equal(t, (len(rebuildOrder)+pageSize-1)/pageSize, pages,
				"a full last page has has_more false (no empty page after it)")
			// The int keys come as JSON numbers, the text keys as strings.
			require.Equal(t, "-5", string(rows[0].PK))
			require.Equal(t, `"A"`, string(rows[8].PK))
			got := replica{}
			got.applyRebuild(t, rows)
			requireReplica(t, live, got, "the rebuilt scope")
		})
	}
	t.Run("EmptyScope", func(t *testing.T) {
		p := mustRebuildPage(t, db, "rb", "owner:nobody", "", 5)
		require.Empty(t, p.Rows)
		require.False(t, p.HasMore)
		require.Equal(t, chainChecksum(nil), p.Checksum)
		require.Equal(t, "0000000000000000000000000000000000000000000000000000000000000000", p.Checksum)
		q := mustPull(t, db, "rb", "owner:nobody", p.Cursor, 5)
		require.Empty(t, q.Changes)
	})
	t.Run("ChecksumDetectsTampering", func(t *testing.T) {
		rows, last := fullRebuild(t, db, "rb", "owner:o", 4)
		rows[3].Version += "x"
		require.NotEqual(t, chainChecksum(rows), last.Checksum)
	})
}

// The final cursor continues pull: rebuild + pulls equal the live state.
func TestRebuildCursorContinuesPull(t *testing.T) {
	t.Parallel()
	e := newRebuildEnv(t)
	db := e.db
	rows, last := fullRebuild(t, db, "rb", "owner:o", 5)
	rep := replica{}
	rep.applyRebuild(t, rows)
	write(t, db, `UPDATE tb SET body = 'TWO' WHERE id = 2; DELETE FROM ta WHERE id = 'B';
		INSERT INTO ta (id, owner, body) VALUES ('new', 'o', 'n'); UPDATE ta SET owner = 'other' WHERE id = 'c';
		UPDATE tb SET owner = 'o' WHERE id = 7`)
	changes, cur := pullAll(t, db, "rb", "owner:o", last.Cursor, 2)
	require.ElementsMatch(t, []string{"upsert:t_b/2", "delete:ta/B", "upsert:ta/new", "delete:ta/c", "upsert:t_b/7"}, opsOf(changes))
	rep.apply(t, changes)
	requireReplica(t, liveScope(t, db, rebuildLiveSQL, "owner:o"), rep, "rebuild then pull")
	p := mustPull(t, db, "rb", "owner:o", cur, 2)
	require.Empty(t, p.Changes)
}

// Rows changed between the pages of one session (before and after the keyset position,
// updated, deleted, inserted, moved out) still converge through the final cursor.
func TestRebuildRowChangedBetweenPages(t *testing.T) {
	t.Parallel()
	e := newRebuildEnv(t)
	db := e.db
	before := liveScope(t, db, rebuildLiveSQL, "owner:o")

	p := mustRebuildPage(t, db, "rb", "owner:o", "", 3)
	require.Equal(t, []string{"t_b/-5", "t_b/1", "t_b/2"}, rowKeys(p.Rows))
	delivered := append([]rebuildRow(nil), p.Rows...)

	write(t, db, `
		UPDATE tb SET body = 'ONE' WHERE id = 1;          -- already delivered
		UPDATE tb SET body = 'HUNDRED' WHERE id = 100;    -- not yet delivered
		DELETE FROM ta WHERE id = 'a';                     -- not yet delivered
		DELETE FROM tb WHERE id = -5;                      -- already delivered
		INSERT INTO tb (id, owner, body) VALUES (0, 'o', 'zero');   -- before the position
		INSERT INTO ta (id, owner, body) VALUES ('zz', 'o', 'zz');  -- after it
		UPDATE tb SET owner = 'other' WHERE id = 9;        -- moves out, not yet delivered`)

	session := p.Session
	for p.HasMore {
		p = mustRebuildPage(t, db, "rb", "owner:o", session, 3)
		delivered = append(delivered, p.Rows...)
		session = p.Session
	}
	require.Equal(t, chainChecksum(delivered), p.Checksum, "the checksum covers what was delivered")
	keys := rowKeys(delivered)
	require.NotContains(t, keys, "t_b/0", "inserted before the position: arrives by pull")
	require.Contains(t, keys, "ta/zz", "inserted after the position: arrives in its newer state")
	require.NotContains(t, keys, "ta/a")

	rep := replica{}
	rep.applyRebuild(t, delivered)
	changes, _ := pullAll(t, db, "rb", "owner:o", p.Cursor, 4)
	rep.apply(t, changes)
	after := liveScope(t, db, rebuildLiveSQL, "owner:o")
	require.NotEqual(t, before, after)
	requireReplica(t, after, rep, "rebuild with changes between pages, then pull")
}

package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Pull and rebuild pages stop at a byte budget of row images as well as at their row
// bound (CONTRACT.md "Pull"): a page holds changes (rows) while the sum of their images'
// sizes (octet_length of the image's JSON text) stays within the budget, and at least
// one, so a single image larger than the budget comes alone. The budget is the
// owner-only setting page_byte_budget in synchro.setting (default 8 MiB); these tests
// lower it for their own database.

const defaultPageByteBudget = 8 << 20

// setPageByteBudget sets this database's page byte budget (as the owner).
func setPageByteBudget(t *testing.T, db *testdb.DB, n int) {
	t.Helper()
	mustExec(t, db, `INSERT INTO synchro.setting (name, value) VALUES ('page_byte_budget', $1)
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`, strconv.Itoa(n))
}

// budgetPage is one page's image sizes (0 for a delete) and its has_more.
type budgetPage struct {
	sizes []int
	more  bool
}

// requireBudgetPages checks the paging rule over consecutive pages of one stream: every
// page holds 1 to max items; a page of more than one item stays within the budget; a
// page with has_more stopped for a reason: it is full, or the next item would not have
// fit; only the last page has has_more false.
func requireBudgetPages(t *testing.T, pages []budgetPage, budget, max int) {
	t.Helper()
	for i, p := range pages {
		sum := 0
		for _, s := range p.sizes {
			sum += s
		}
		require.NotEmpty(t, p.sizes, "page %d is empty", i)
		require.LessOrEqual(t, len(p.sizes), max, "page %d", i)
		if len(p.sizes) > 1 {
			require.LessOrEqual(t, sum, budget, "page %d: %v over the budget", i, p.sizes)
		}
		if i < len(pages)-1 {
			require.True(t, p.more, "page %d: has_more before the last page", i)
			if len(p.sizes) < max {
				next := pages[i+1].sizes[0]
				require.Greater(t, sum+next, budget, "page %d %v stopped early: the next image (%d bytes) fits", i, p.sizes, next)
			}
		} else {
			require.False(t, p.more, "the last page")
		}
	}
}

// budgetBodies are note bodies of assorted lengths, one of them larger than any budget
// the tests set.
func budgetBodies() []int {
	return []int{120, 700, 50, 400, 900, 30, 5000, 650, 650, 10, 333, 800, 1200, 60, 700, 90, 480, 520, 1000, 1}
}

// writeBudgetNotes writes notes n0..n19 of owner b in three transactions, then updates
// and deletes a few, and returns the live scope query's state afterwards.
func writeBudgetNotes(t *testing.T, db *testdb.DB) {
	t.Helper()
	var stmts []string
	for i, n := range budgetBodies() {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO notes (id, owner, body) VALUES ('n%02d', 'b', repeat('x', %d));`, i, n))
	}
	write(t, db, strings.Join(stmts[:7], "\n"))
	write(t, db, strings.Join(stmts[7:15], "\n"))
	write(t, db, strings.Join(stmts[15:], "\n"))
	write(t, db, `UPDATE notes SET body = repeat('y', 1500) WHERE id = 'n05';
		DELETE FROM notes WHERE id IN ('n02', 'n09');
		UPDATE notes SET body = 'short' WHERE id = 'n06'`)
}

// pullPages pages through a scope from cursor and returns the changes, the pages' shapes
// and the final cursor.
func pullPages(t *testing.T, db *testdb.DB, clientID, scope, cursor string, max int) ([]change, []budgetPage, string) {
	t.Helper()
	var all []change
	var pages []budgetPage
	for {
		p := mustPull(t, db, clientID, scope, cursor, max)
		bp := budgetPage{more: p.HasMore}
		for _, c := range p.Changes {
			bp.sizes = append(bp.sizes, len(c.Row))
		}
		pages = append(pages, bp)
		all = append(all, p.Changes...)
		cursor = p.Cursor
		if !p.HasMore {
			return all, pages, cursor
		}
		require.Less(t, len(pages), 1000, "runaway paging")
	}
}

// rebuildPages runs a whole rebuild session and returns the rows, the pages' shapes and
// the last page.
func rebuildPages(t *testing.T, db *testdb.DB, clientID, scope string, max int) ([]rebuildRow, []budgetPage, rebuildPage) {
	t.Helper()
	var rows []rebuildRow
	var pages []budgetPage
	session := ""
	for {
		p, err := rebuildRaw(db, clientID, scope, session, max)
		require.NoError(t, err)
		bp := budgetPage{more: p.HasMore}
		for _, r := range p.Rows {
			bp.sizes = append(bp.sizes, len(r.Row))
		}
		pages = append(pages, bp)
		rows = append(rows, p.Rows...)
		if !p.HasMore {
			require.NotEmpty(t, p.Cursor)
			require.Len(t, p.Checksum, 64)
			return rows, pages, p
		}
		require.Empty(t, p.Cursor)
		require.Empty(t, p.Checksum)
		session = p.Session
		require.Less(t, len(pages), 1000, "runaway paging")
	}
}

func changesText(cs []change) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Op+":"+c.key()+":"+c.Version+":"+string(c.Row))
	}
	return out
}

func rowsText(rs []rebuildRow) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.key()+":"+r.Version+":"+string(r.Row))
	}
	return out
}

func TestPullPagesStopAtByteBudget(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	_, cur := startScope(t, db, "bytes", "owner:b")
	writeBudgetNotes(t, db)

	// The stream under the default budget: one page.
	ref := mustPull(t, db, "bytes", "owner:b", cur, 1000)
	require.False(t, ref.HasMore)
	require.Len(t, ref.Changes, 24)

	const budget = 2000
	setPageByteBudget(t, db, budget)
	for _, max := range []int{1000, 3, 1} {
		t.Run(fmt.Sprintf("Max%d", max), func(t *testing.T) {
			got, pages, end := pullPages(t, db, "bytes", "owner:b", cur, max)
			require.Equal(t, changesText(ref.Changes), changesText(got), "the pages are the stream, in order")
			require.Equal(t, ref.Cursor, end, "the last page closes at the high-watermark")
			requireBudgetPages(t, pages, budget, max)
			if max > 1 {
				require.Greater(t, len(pages), 24/max+1, "the budget stopped pages: %v", pages)
			}
			// The image larger than the budget came alone.
			alone := false
			for _, p := range pages {
				if len(p.sizes) == 1 && p.sizes[0] > budget {
					alone = true
				}
			}
			require.True(t, alone, "a page with the large image alone: %v", pages)
		})
	}
}

func TestRebuildPagesStopAtByteBudget(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	writeBudgetNotes(t, db)

	const budget = 2000
	for _, max := range []int{1000, 4, 1} {
		t.Run(fmt.Sprintf("Max%d", max), func(t *testing.T) {
			// The scope under the default budget: one page.
			setPageByteBudget(t, db, defaultPageByteBudget)
			refRows, refLast := fullRebuild(t, db, "bytes", "owner:b", 1000)
			require.Len(t, refRows, 18)
			require.Equal(t, chainChecksum(refRows), refLast.Checksum)

			setPageByteBudget(t, db, budget)
			rows, pages, last := rebuildPages(t, db, "bytes", "owner:b", max)
			require.Equal(t, rowsText(refRows), rowsText(rows), "the pages are the scope, in order")
			requireBudgetPages(t, pages, budget, max)
			if max > 1 {
				require.Greater(t, len(pages), 18/max+1, "the budget stopped pages: %v", pages)
			}
			// The checksum chain runs across the pages that stopped on the budget.
			require.Equal(t, refLast.Checksum, last.Checksum)
			require.Equal(t, chainChecksum(rows), last.Checksum)

			// Its cursor continues by pull: a change after the rebuild arrives.
			rep := replica{}
			rep.applyRebuild(t, rows)
			write(t, db, fmt.Sprintf(`UPDATE notes SET body = repeat('z', %d) WHERE id = 'n00'`, 2500+max))
			changes, _ := pullAll(t, db, "bytes", "owner:b", last.Cursor, 1000)
			rep.apply(t, changes)
			requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:b"), rep, "rebuild in budget pages, then pull")
		})
	}
}

// The default budget, 8 MiB, with 1 MB images: eight to a page.
func TestPagesStopAtTheDefaultByteBudget(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	var budget int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT value::int FROM synchro.setting WHERE name = 'page_byte_budget'`).Scan(&budget))
	require.Equal(t, defaultPageByteBudget, budget)

	_, cur := startScope(t, db, "mb", "owner:mb")
	write(t, db, `INSERT INTO notes (id, owner, body) SELECT 'm' || lpad(g::text, 2, '0'), 'mb', repeat(chr(97 + g), 1000000)
		FROM generate_series(0, 9) g`)
	changes, pages, _ := pullPages(t, db, "mb", "owner:mb", cur, 1000)
	require.Len(t, changes, 10)
	requireBudgetPages(t, pages, budget, 1000)
	require.Len(t, pages, 2)
	require.Len(t, pages[0].sizes, 8)

	rows, rpages, last := rebuildPages(t, db, "mb", "owner:mb", 1000)
	require.Len(t, rows, 10)
	requireBudgetPages(t, rpages, budget, 1000)
	require.Len(t, rpages, 2)
	require.Equal(t, chainChecksum(rows), last.Checksum)
}

// The budget is an owner-only setting that fails closed: a value that is not a whole
// number of bytes in range is refused when it is written.
func TestPageByteBudgetSetting(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for _, bad := range []string{"0", "-1", "8MB", "", "1e6", "67108865", "99999999999"} {
		_, err := db.Pool.Exec(ctx, `UPDATE synchro.setting SET value = $1 WHERE name = 'page_byte_budget'`, bad)
		requireSQLState(t, err, "23514")
	}
	for _, good := range []string{"1", "1024", "67108864"} {
		_, err := db.Pool.Exec(ctx, `UPDATE synchro.setting SET value = $1 WHERE name = 'page_byte_budget'`, good)
		require.NoError(t, err)
	}
	for _, role := range []string{"synchro_app", "synchro_operator", "synchro_runner"} {
		var ok bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT has_table_privilege($1, 'synchro.setting', 'UPDATE')
			OR has_table_privilege($1, 'synchro.setting', 'INSERT') OR has_table_privilege($1, 'synchro.setting', 'SELECT')`, role).Scan(&ok))
		require.False(t, ok, "%s may not read or change synchro.setting", role)
	}
}

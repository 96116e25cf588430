package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The empty string is a text key PostgreSQL accepts, so it must never stop the stream:
// its fence carries an empty key field (format 3 `0:`), which the runner parses as the
// key it is, and the row is materialized like any other, in a synced table and in a
// capture_dependency relation whose row moves another table's row between scopes.
func TestRunnerEmptyTextKey(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE teams (id text PRIMARY KEY, owner text);
			CREATE TABLE notes (id text PRIMARY KEY, team text, body text);
			SELECT synchro.register_dependency('teams');
			SELECT synchro.register_table('notes', 'notes');
			SELECT synchro.add_scope_rule('notes', 'owner:', 'team', 'teams', 'id', 'owner');
			SELECT synchro.activate_registry();`)
		rr := startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		mustExec(t, db, `INSERT INTO teams VALUES ('', 'a')`)
		mustExec(t, db, `INSERT INTO notes VALUES ('', '', 'first')`)
		got := waitEffects(t, db, 1)
		require.Equal(t, "owner:a upsert", got[0].Scope+" "+got[0].Op)
		require.Equal(t, "", got[0].PK)

		// The dependency row with the empty key moves the note to another scope.
		mustExec(t, db, `UPDATE teams SET owner = 'b' WHERE id = ''`)
		got = waitEffects(t, db, 3)
		require.Equal(t, []string{"owner:a delete", "owner:b upsert"},
			[]string{got[1].Scope + " " + got[1].Op, got[2].Scope + " " + got[2].Op})

		// Rebuild and pull page across it, one row a page, with a neighbour key.
		mustExec(t, db, `INSERT INTO notes VALUES ('a', '', 'neighbour')`)
		waitEffects(t, db, 4)
		rows, last := fullRebuild(t, db, "c1", "owner:b", 1)
		require.Len(t, rows, 2)
		require.Equal(t, []string{"notes/", "notes/a"}, []string{rows[0].key(), rows[1].key()})

		mustExec(t, db, `UPDATE notes SET body = 'second' WHERE id IN ('', 'a')`)
		mustExec(t, db, `DELETE FROM notes WHERE id = ''`)
		got = waitEffects(t, db, 7)
		changes, _ := pullAll(t, db, "c1", "owner:b", last.Cursor, 1)
		require.Len(t, changes, 3)
		require.ElementsMatch(t, []string{"upsert:notes/", "upsert:notes/a"}, opsOf(changes[:2]), "one transaction")
		require.Equal(t, "delete:notes/", changes[2].String())
		for _, e := range got {
			if e.PK != "a" {
				require.Equal(t, "", e.PK)
			}
		}
		require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`), "nothing quarantined")
		require.NoError(t, rr.stop(t))
	})
}

package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// A column registered only in a registry generation the stream has left behind is
// never staged again. The fence checks at the source only the columns of the active
// and pending generations, so once a later activation rebuilt the fence, the
// application may write there a value jsonb refuses (json's \u0000): staged, it failed
// the runner's COPY (22P05) and quarantined a good transaction, blocking the stream.
//
// The runner meets the write running, and as a backlog it finds at its start.
func TestRunnerRetiredColumnNeverStaged(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		for _, backlog := range []bool{false, true} {
			name := "running"
			if backlog {
				name = "backlog"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := testdb.New(t)
				mustExec(t, db, `
					CREATE TABLE docs (id int8 PRIMARY KEY, owner text, meta json);
					SELECT synchro.register_table('docs', 'docs', ARRAY['owner', 'meta']);
					SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
					SELECT synchro.activate_registry();
					INSERT INTO docs VALUES (1, 'a', '{"k": 1}');`)
				cfg := testRunnerConfig(t, db)
				cfg.BatchTxns = 1000
				rr := startRunner(t, cfg)
				waitStream(t, db)
				if backlog {
					require.NoError(t, rr.stop(t))
					waitRunnerGone(t, db)
				}

				// Generation 2 leaves meta out; generation 3 (another scope rule) rebuilds
				// the fences while generation 2 is the active one: meta is no longer
				// checked. One source transaction: the stream's progress is at generation
				// 1 whenever the runner reloads its columns in it, so only the generations
				// of its activation messages leave meta out.
				mustExec(t, db, `BEGIN;
					SELECT synchro.set_columns(relation_id, ARRAY['owner']) FROM synchro.relation WHERE table_id = 'docs';
					SELECT synchro.activate_registry();
					SELECT synchro.add_scope_rule('docs', 'x:', 'owner');
					SELECT synchro.activate_registry();
					UPDATE docs SET meta = '{"k": "\u0000"}'::json, owner = 'b' WHERE id = 1;
					COMMIT;`)
				if backlog {
					rr = startRunner(t, cfg)
				}
				// Not catchUp: generation 2's projection bootstrap is merged once the stream
				// passes its consistent point, which can come after the update.
				waitImage(t, db, `{"id": 1, "owner": "b"}`)
				requireNoQuarantine(t, db)
				require.NoError(t, rr.stop(t))
			})
		}
	})
}

// waitImage waits until the one projected row's image is want (a quarantine blocks it).
func waitImage(t *testing.T, db *testdb.DB, want string) {
	t.Helper()
	eventually(t, 60*time.Second, "image "+want, func() bool {
		return textOf(t, db, `SELECT coalesce(min(image::text), '') FROM synchro.projection`) == want
	})
}

// A column registered in a pending generation (staged, not yet activated) is not in
// the fence yet: the fence is generated at activation. A runner that started while
// that generation was pending staged its columns for every event, and a value jsonb
// refuses there (json's \u0000), written before the activation, failed the stage's
// COPY: a good transaction quarantined (found in the twelfth session). The runner
// stages a generation's columns only once it is active; a pending one's are loaded at
// its activation message.
func TestRunnerPendingColumnNotStaged(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		mustExec(t, db, `
			CREATE TABLE docs (id int8 PRIMARY KEY, owner text, meta json);
			SELECT synchro.register_table('docs', 'docs', ARRAY['owner']);
			SELECT synchro.add_scope_rule('docs', 'owner:', 'owner');
			SELECT synchro.activate_registry();
			INSERT INTO docs VALUES (1, 'a', NULL);`)
		cfg := testRunnerConfig(t, db)
		rr := startRunner(t, cfg)
		waitStream(t, db)
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)

		// Generation 2 registers meta and stays pending while the runner starts.
		mustExec(t, db, `SELECT synchro.set_columns(relation_id, ARRAY['owner', 'meta']) FROM synchro.relation WHERE table_id = 'docs'`)
		rr = startRunner(t, cfg)
		mustExec(t, db, `UPDATE docs SET meta = '{"k": "\u0000"}'::json, owner = 'b' WHERE id = 1`)
		waitImage(t, db, `{"id": 1, "owner": "b"}`)
		requireNoQuarantine(t, db)

		// Activated, meta is checked at the source and staged from the activation on.
		mustExec(t, db, `UPDATE docs SET meta = NULL WHERE id = 1; SELECT synchro.activate_registry();`)
		mustExec(t, db, `UPDATE docs SET meta = '{"k": 2}'::json, owner = 'c' WHERE id = 1`)
		waitImage(t, db, `{"id": 1, "meta": {"k": 2}, "owner": "c"}`)
		requireNoQuarantine(t, db)
		require.NoError(t, rr.stop(t))
	})
}

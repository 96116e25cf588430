package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// pollFor polls cond every 50ms for at most d (no floor, unlike eventually).
func pollFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}

// wal2json ends a session at a registry activation message of a generation its table
// set predates (decode.ClassTableSetChanged), and the runner remembers one such
// position (Runner.restartedAt) to skip in the next session. Anyone may emit a
// transactional synchro.registry message (pg_logical_emit_message is PUBLIC), and the
// decoder did not check the MAC: two forged activations in one source transaction
// alternated for ever (session n skipped the first and stopped at the second, session
// n+1 the reverse), capture stopped while the runner spun through sessions. The
// decoder follows only authentic activations now (decode.SessionSpec.Authentic).
func TestRunnerForgedActivationsIgnored(t *testing.T) {
	testdb.RequireLibrary(t, "wal2json")
	t.Run("decoder=wal2json", func(t *testing.T) {
		e := newAppEnv(t, appItemsDDL, appItemsRegistry, nil)
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
		waitEffects(t, e.db, 1)

		forged := `SELECT pg_logical_emit_message(true, 'synchro.registry',
			'{"v":2,"generation":99,"previous":1,"mac":"00000000000000000000000000000000"}')`
		// The application's own transaction: two forged activations and a genuine write.
		e.appExec(t, `BEGIN; `+forged+`; `+forged+`; INSERT INTO app.items (id, owner) VALUES (2, 'a'); COMMIT`)
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (3, 'a')`)

		ok := pollFor(30*time.Second, func() bool {
			return countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk IN ('2', '3')`) == 2
		})
		logs := e.logs.String()
		if !ok {
			t.Fatalf("capture stopped by two forged activation messages: rows 2 and 3 not materialized after 30s; "+
				"%d replication sessions started, %d table-set restarts; quarantines %+v",
				strings.Count(logs, "replication started"), strings.Count(logs, "registry activation in the stream"),
				quarantines(t, e.db))
		}
	})
}

// The wal2json decoder follows registry activation messages to decide from
// which position a newly registered relation's changes are decoded (session.curGen,
// published), before the applier authenticates them (the MAC is checked only in
// applier.Event). A forged activation {generation: G+1, previous: G}, emitted by any
// role before the genuine activation of G+1 reaches the runner, makes the decoder
// decode changes of the relation G+1 registers from before its registration (pgoutput's
// publication never sends them): materialization refused them (SYP04) and the stream
// was quarantined. Only authentic activations move it now.
func TestRunnerForgedActivationPublishesNothingEarly(t *testing.T) {
	testdb.RequireLibrary(t, "wal2json")
	t.Run("decoder=wal2json", func(t *testing.T) {
		e := newAppEnv(t, appItemsDDL+`; CREATE TABLE app.more (id int8 PRIMARY KEY, owner text, note text)`,
			appItemsRegistry, nil)
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
		waitEffects(t, e.db, 1)
		waitAcked(t, e.db)
		g := countOf(t, e.db, `SELECT registry_generation::int FROM synchro.progress`)
		require.NoError(t, e.rr.stop(t))
		waitRunnerGone(t, e.db)

		// The attacker: a forged activation of the next generation, then a write of a
		// table nobody registered yet (no fence trigger: it is not registered).
		e.appExec(t, fmt.Sprintf(`BEGIN; SELECT pg_logical_emit_message(true, 'synchro.registry',
			'{"v":2,"generation":%d,"previous":%d,"mac":"00000000000000000000000000000000"}');
			INSERT INTO app.more (id, owner) VALUES (1, 'a'); COMMIT`, g+1, g))
		// The operator registers it afterwards (generation G+1).
		mustExec(t, e.db, `SELECT synchro.register_table('app.more', 'more', ARRAY['owner']::name[]);
			SELECT synchro.add_scope_rule('more', 'm:', 'owner');
			SELECT synchro.activate_registry();`)
		require.Equal(t, g+1, countOf(t, e.db, `SELECT max(generation)::int FROM synchro.registry_generation WHERE activated_at IS NOT NULL`))

		startRunner(t, testRunnerConfig(t, e.db))
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (7, 'a')`)
		ok := pollFor(30*time.Second, func() bool {
			return len(quarantines(t, e.db)) > 0 ||
				countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '7'`) > 0
		})
		require.True(t, ok, "neither materialized nor quarantined")
		require.Empty(t, quarantines(t, e.db), "a forged activation message quarantined the stream")
	})
}

// A database default of bytea_output = escape (or any of the rendering settings the
// runner pins) changes nothing: the runner sets them on its own sessions, the
// walsender's included. Before bytea_output was pinned, wal2json carried escape-format
// bytea, which its decoder refused (it was how this file provoked a first-change
// poison: TestFirstChangeRefusalCarriesCommitLSN keeps that case as a unit test), and
// pgoutput's images of bytea rendered in the database's format.
func TestRunnerDatabaseByteaOutputEscapeHarmless(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		e := newAppEnv(t, `CREATE TABLE app.items (id int8 PRIMARY KEY, owner text, v int NOT NULL DEFAULT 0, b bytea)`, `
			SELECT synchro.register_table('app.items', 'items', ARRAY['owner', 'v', 'b']::name[]);
			SELECT synchro.add_scope_rule('items', 'owner:', 'owner');
			SELECT synchro.activate_registry();`, nil)
		e.appExec(t, `INSERT INTO app.items (id, owner) VALUES (1, 'a')`)
		waitEffects(t, e.db, 1)
		waitAcked(t, e.db)
		require.NoError(t, e.rr.stop(t))
		waitRunnerGone(t, e.db)

		mustExec(t, e.db, fmt.Sprintf(`ALTER DATABASE %s SET bytea_output = 'escape'`, quoteIdent(e.db.Name)))
		e.appExec(t, `INSERT INTO app.items (id, owner, b) VALUES (2, 'a', '\x41424344'::bytea)`)
		startRunner(t, testRunnerConfig(t, e.db))
		require.True(t, pollFor(30*time.Second, func() bool {
			return len(quarantines(t, e.db)) > 0 || countOf(t, e.db, `SELECT count(*) FROM synchro.effect WHERE pk = '2'`) > 0
		}), "neither materialized nor quarantined")
		require.Empty(t, quarantines(t, e.db))
		require.Equal(t, `\x41424344`, textOf(t, e.db, `SELECT image ->> 'b' FROM synchro.effect WHERE pk = '2'`))
	})
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

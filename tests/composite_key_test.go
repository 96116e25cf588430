package tests

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Issue 9 item 8(e): a registered key that becomes composite. Registration refuses a
// composite key (SY400); the same rule must hold when the key changes after
// registration: refused at activation, and after activation reported by readiness and
// blocking capture as relation drift.

// compositeKeyDDL makes items' primary key (id, v): the registered key column id is
// still in it, so only the key's arity changed.
const compositeKeyDDL = `ALTER TABLE items DROP CONSTRAINT items_pkey, ADD CONSTRAINT items_pkey PRIMARY KEY (id, v)`

// Between registration and activation: the activation is refused with SY400 and
// activates nothing; once the key is single again, it activates.
func TestCompositeKeyBeforeActivation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE items (id int8 NOT NULL, owner text, v int NOT NULL DEFAULT 0, CONSTRAINT items_pkey PRIMARY KEY (id));
		SELECT synchro.register_table('items', 'items');
		SELECT synchro.add_scope_rule('items', 'owner:', 'owner');`)
	mustExec(t, db, compositeKeyDDL)
	pgErr := requireSQLState(t, asRole(ctx, t, db, "synchro_operator", `SELECT synchro.activate_registry()`), "SY400")
	require.Contains(t, pgErr.Message, "composite primary keys are not supported")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.registry_generation WHERE state = 'active'`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_trigger WHERE tgrelid = 'items'::regclass AND NOT tgisinternal`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_publication_rel`))

	mustExec(t, db, `ALTER TABLE items DROP CONSTRAINT items_pkey, ADD CONSTRAINT items_pkey PRIMARY KEY (id)`)
	mustExec(t, db, `SELECT synchro.activate_registry()`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.registry_generation WHERE state = 'active'`))
}

// After activation with the stream running: readiness reports the registry drifted
// (key), and a write under the composite key blocks capture as relation_drift.
func TestCompositeKeyAfterActivation(t *testing.T) {
	t.Parallel()
	db, _ := readySystem(t)
	mustExec(t, db, compositeKeyDDL)
	rows := waitFailing(t, db, "registry")
	require.Equal(t, "generation=1 relations=1 drifted=1 first=relation_id 1 key", checkRow(rows, "registry").Detail)
	require.Equal(t, []string{"registry"}, failingChecks(rows), "nothing else is wrong yet")
}

// A write under the composite key is refused at the source (0A000: the fence's full
// check finds the registered key no longer the primary key): it never reaches the WAL,
// so it cannot block capture (until 2026-12-04 it did, as relation_drift for every
// scope: TestDdlEdgeKeyDriftRefusedAtSource).
func TestCompositeKeyRefusedAtSource(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := runnerSetup(t)
		startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
		waitEffects(t, db, 1)
		mustExec(t, db, compositeKeyDDL)
		for _, sql := range []string{
			`UPDATE items SET note = 'under a composite key' WHERE id = 1`,
			`INSERT INTO items (id, owner) VALUES (20, 'a')`,
			`DELETE FROM items WHERE id = 5`,
		} {
			_, err := db.Pool.Exec(ctx, sql)
			requireSQLState(t, err, "0A000")
		}
		waitAcked(t, db)
		requireNoQuarantine(t, db)
		require.Len(t, effects(t, db), 1, "nothing after the DDL was materialized")
	})
}

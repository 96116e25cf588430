package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// Edge cases of consumer groups (CONTRACT.md "Consumer groups") and of the projection
// bootstrap's change records of a re-projected relation, from an independent review
// (2026-12-04). Four were bugs, each red before its fix: two re-projections staged
// under one snapshot collided on the change record's key (the stream retried for
// ever), a relation new to the stream whose first bootstrap was superseded had its
// baseline sent as changes, a group created at latest after an idle-boundary merge
// was handed that merge's earlier changes, and create_consumer_group took the id of an
// unregistered table.

// reviewDrain reads and acknowledges the group until caught up, one transaction per
// read, and returns each transaction's changes as "table:op:pk" strings.
func reviewDrain(t *testing.T, db *testdb.DB, group string) ([][]string, []string) {
	t.Helper()
	c := consumerConn(t, db)
	tok, err := acquireLease(c, group, "review-drain", 60)
	require.NoError(t, err)
	var txns [][]string
	var positions []string
	for range 200 {
		r, err := readChanges(c, group, tok, 1, 1<<20)
		require.NoError(t, err)
		for _, x := range r.Transactions {
			got := []string{}
			for _, ch := range x.Changes {
				got = append(got, ch.Table+":"+ch.Op+":"+pkText(ch.PK))
			}
			txns = append(txns, got)
			positions = append(positions, x.Position)
			require.NoError(t, ackPosition(c, group, tok, x.Position))
		}
		if !r.HasMore {
			break
		}
	}
	_, err = c.Exec(context.Background(), `SELECT synchro.release_lease($1, $2)`, group, tok)
	require.NoError(t, err)
	return txns, positions
}

// waitBootstrapsOrQuarantine waits until every projection bootstrap merged, or the
// stream holds a quarantine record (a stall the test reports instead of timing out).
func waitBootstrapsOrQuarantine(t *testing.T, db *testdb.DB) {
	t.Helper()
	eventually(t, 60*time.Second, "projection bootstraps merged or a quarantine (the runner retries the merge for ever: see its log)", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.bootstrap WHERE merged_at IS NULL AND phase <> 'subsumed'`) == 0 ||
			len(quarantines(t, db)) > 0
	})
}

// Two relations that streamed before are re-projected by one activation (set_columns
// on both): the runner stages both bootstraps under one snapshot, so both have the
// same consistent point C, and the merge writes each one's window difference at
// (generation, C - 1) with event ordinals from 0: the second collides with the first
// on synchro.change's primary key.
func TestConsumerGroupTwoReprojectionsOneSnapshot(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
		CREATE TABLE tags (id text PRIMARY KEY, label text);
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.register_table('tags', 'tags');
		SELECT synchro.activate_registry();
		SELECT synchro.create_consumer_group('whole');`)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'a'), ('n2', 'b'); INSERT INTO tags VALUES ('t1', 'x'), ('t2', 'y')`)
	waitChangeTxns(t, db, 1)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'),
		ARRAY['id']::name[]);
		SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'tags'),
		ARRAY['id']::name[]);
		SELECT synchro.activate_registry();`)
	mustExec(t, db, `UPDATE notes SET body = 'a2' WHERE id = 'n1'`)
	mustExec(t, db, `UPDATE tags SET label = 'x2' WHERE id = 't1'`)
	startRunner(t, testRunnerConfig(t, db))
	waitBootstrapsOrQuarantine(t, db)
	require.Empty(t, quarantines(t, db), "the merge of two re-projections must not poison the stream")
	require.Equal(t, 1, countOf(t, db, `SELECT count(DISTINCT consistent_point) FROM synchro.bootstrap WHERE kind = 'project'
		AND relation_id IN (SELECT relation_id FROM synchro.relation WHERE table_id IN ('notes', 'tags'))`),
		"both bootstraps share one snapshot")
	mustExec(t, db, `INSERT INTO notes VALUES ('n9', 'z')`)
	eventually(t, 60*time.Second, "the later insert materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.change WHERE pk = 'n9'`) == 1
	})
	txns, _ := reviewDrain(t, db, "whole")
	var all []string
	for _, x := range txns {
		all = append(all, x...)
	}
	require.Contains(t, all, "notes:upsert:n1")
	require.Contains(t, all, "tags:upsert:t1")
}

// A group created at `latest` after a re-projection's merge at an idle boundary: the
// merge wrote the window's difference at C - 1 before the group existed, but the
// materialization high-watermark (the group's checkpoint) is still the last source
// transaction before C, below C - 1, so the new group is handed that older
// transaction. docs/sql/create_consumer_group.md: `latest`: "the materialization
// high-watermark (only later transactions)".
func TestConsumerGroupLatestAfterIdleMerge(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.activate_registry();`)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'a'), ('n2', 'b')`)
	waitChangeTxns(t, db, 1)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
	mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'),
		ARRAY['id']::name[]); SELECT synchro.activate_registry();`)
	mustExec(t, db, `UPDATE notes SET body = 'a2' WHERE id = 'n1'`)
	startRunner(t, testRunnerConfig(t, db))
	waitBootstraps(t, db)
	requireNoQuarantine(t, db)
	// The merge happened at an idle boundary: no source transaction at or after C yet.
	cp := bootstrapPoint(t, db, "notes")
	require.Equal(t, 0, countOf(t, db, `SELECT count(*) FROM synchro.txn WHERE commit_lsn >= $1::pg_lsn`, cp))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.change WHERE commit_lsn = $1::pg_lsn - 1`, cp))

	c := consumerConn(t, db)
	_, err := c.Exec(context.Background(), `SELECT synchro.create_consumer_group('late', 'latest')`)
	require.NoError(t, err)
	txns, positions := reviewDrain(t, db, "late")
	require.Empty(t, txns, "a group created at latest after the merge is handed the merge's earlier transaction %v", positions)
}

// A re-projection merged by the transaction path (a source transaction after the
// consistent point arrives before any idle boundary), under the set-based and the
// per-transaction materialization: groups with and without table_ids filters, a group
// created at `latest` inside the window, compaction run before any group read: every
// group gets each of its transactions once, in commit order, the window's difference
// as one transaction at C - 1, and the relation's window events in no other.
func TestConsumerGroupReprojectionTransactionPath(t *testing.T) {
	for _, perTxn := range []bool{false, true} {
		name := "set_based"
		if perTxn {
			name = "per_transaction"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := runnerSetup(t)
			cfg := func() runner.Config {
				c := testRunnerConfig(t, db)
				c.PerTransaction = perTxn
				return c
			}
			mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
				SELECT synchro.register_table('notes', 'notes');
				SELECT synchro.activate_registry();
				SELECT synchro.create_consumer_group('whole');
				SELECT synchro.create_consumer_group('only_notes', 'earliest', ARRAY['notes']);
				SELECT synchro.create_consumer_group('only_items', 'earliest', ARRAY['items']);`)
			rr := startRunner(t, cfg())
			waitStream(t, db)
			mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'a'), ('n2', 'b'), ('n3', 'c')`)
			mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
			waitChangeTxns(t, db, 2)
			require.NoError(t, rr.stop(t))
			waitRunnerGone(t, db)

			mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'),
				ARRAY['id']::name[]); SELECT synchro.activate_registry();`)
			mustExec(t, db, `UPDATE notes SET body = 'a2' WHERE id = 'n1'`)
			mustExec(t, db, `SELECT synchro.create_consumer_group('win_latest', 'latest')`)
			mustExec(t, db, `DELETE FROM notes WHERE id = 'n2'`)
			mustExec(t, db, `INSERT INTO items (id, owner) VALUES (11, 'a')`)

			lock, err := db.Pool.Acquire(ctx)
			require.NoError(t, err)
			defer lock.Release()
			_, err = lock.Exec(ctx, `SELECT pg_advisory_lock(`+bootstrapLock+`)`)
			require.NoError(t, err)
			startRunner(t, cfg())
			eventually(t, 120*time.Second, "the staging transaction holding its snapshot", func() bool {
				return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
					WHERE l.locktype = 'advisory' AND NOT l.granted AND a.datname = current_database()`) == 1
			})
			mustExec(t, db, `UPDATE notes SET body = 'c2' WHERE id = 'n3'; INSERT INTO notes VALUES ('n4', 'd')`)
			_, err = lock.Exec(ctx, `SELECT pg_advisory_unlock(`+bootstrapLock+`)`)
			require.NoError(t, err)
			waitBootstraps(t, db)
			eventually(t, 60*time.Second, "the write after the point materialized", func() bool {
				return countOf(t, db, `SELECT count(*) FROM synchro.change WHERE pk = 'n4'`) == 1
			})
			requireNoQuarantine(t, db)
			cp := bootstrapPoint(t, db, "notes")
			require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.change WHERE commit_lsn = $1::pg_lsn - 1`, cp))

			// Compaction before any group read: nothing a group has not acknowledged goes.
			mustExec(t, db, `SELECT synchro.compact('0')`)
			mustExec(t, db, `SELECT synchro.compact('0')`)

			flat := func(txns [][]string) []string {
				out := []string{}
				for _, x := range txns {
					out = append(out, "|"+strings.Join(x, ","))
				}
				return out
			}
			notesFirst := "|notes:upsert:n1,notes:upsert:n2,notes:upsert:n3"
			diff := "|notes:upsert:n1,notes:delete:n2"
			after := "|notes:upsert:n3,notes:upsert:n4"
			want := map[string][]string{
				"whole":      {notesFirst, "|items:upsert:10", "|items:upsert:11", diff, after},
				"only_notes": {notesFirst, diff, after},
				"only_items": {"|items:upsert:10", "|items:upsert:11"},
				"win_latest": {"|items:upsert:11", diff, after},
			}
			for _, g := range []string{"whole", "only_notes", "only_items", "win_latest"} {
				txns, positions := reviewDrain(t, db, g)
				require.Equal(t, want[g], flat(txns), "group %s (positions %v)", g, positions)
			}
			// Every group acknowledged all: compaction may take the record now, and a
			// group created at earliest afterwards starts at the horizon.
			mustExec(t, db, `SELECT synchro.compact('0')`)
			mustExec(t, db, `SELECT synchro.create_consumer_group('fresh')`)
			txns, _ := reviewDrain(t, db, "fresh")
			for _, x := range flat(txns) {
				require.NotEqual(t, diff, x, "the compacted difference is not delivered again")
			}
		})
	}
}

// A table unregistered (and the removal activated) is no longer a synced table:
// create_consumer_group must refuse its id (docs/sql/create_consumer_group.md: SY400
// for "an id that is not a synced table's").
func TestConsumerGroupCreateNamesUnregisteredTable(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.activate_registry();
		SELECT synchro.unregister_relation((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'));
		SELECT synchro.activate_registry();`)
	c := consumerConn(t, db)
	_, err := c.Exec(context.Background(), `SELECT synchro.create_consumer_group('gone', 'earliest', ARRAY['notes'])`)
	requireSQLState(t, err, "SY400")
}

// Acknowledgement of positions that were not handed to the group: a transaction of a
// table outside its table_ids inside the batch's range, one after the batch, an LSN
// that is no transaction, another generation, a malformed one, the checkpoint itself,
// and a position of an earlier read that a later, shorter read replaced: each SY400,
// nothing changed. Then the right one moves the checkpoint and the next read starts
// after it.
func TestConsumerGroupAckPositionsNotHanded(t *testing.T) {
	t.Parallel()
	db := groupsSetup(t)
	mustExec(t, db, `SELECT synchro.create_consumer_group('n', 'earliest', ARRAY['notes']);
		SELECT synchro.create_consumer_group('w')`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
	mustExec(t, db, `INSERT INTO notes VALUES ('n1', 'x')`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (11, 'a')`)
	mustExec(t, db, `INSERT INTO notes VALUES ('n2', 'y')`)
	waitChangeTxns(t, db, 4)
	all := txnPositions(t, db, nil)
	require.Len(t, all, 4)
	c := consumerConn(t, db)
	tok, err := acquireLease(c, "n", "o1", 60)
	require.NoError(t, err)
	r, err := readChanges(c, "n", tok, 1, 1<<20)
	require.NoError(t, err)
	require.Equal(t, []string{all[1]}, r.positions())
	gen := strings.Split(all[0], ":")[0]
	for _, p := range []string{
		all[0],                                 // items: not its table (and before its handed transaction)
		all[2],                                 // items, after the batch
		all[3],                                 // notes, after the batch
		gen + ":0/1",                           // no transaction
		"999:" + strings.Split(all[1], ":")[1], // another generation
		"x", gen + ":0/0", "",
	} {
		requireSQLState(t, ackPosition(c, "n", tok, p), "SY400")
	}
	require.Equal(t, 2, countOf(t, db, `SELECT lag_transactions FROM synchro.consumer_groups WHERE name = 'n'`))
	require.NoError(t, ackPosition(c, "n", tok, all[1]))
	requireSQLState(t, ackPosition(c, "n", tok, all[1]), "SY400") // the checkpoint itself
	r, err = readChanges(c, "n", tok, 10, 1<<20)
	require.NoError(t, err)
	require.Equal(t, []string{all[3]}, r.positions())

	// A later, shorter read replaces the outstanding batch.
	tw, err := acquireLease(c, "w", "o1", 60)
	require.NoError(t, err)
	r, err = readChanges(c, "w", tw, 10, 1<<20)
	require.NoError(t, err)
	require.Equal(t, all, r.positions())
	r, err = readChanges(c, "w", tw, 1, 1<<20)
	require.NoError(t, err)
	require.Equal(t, all[:1], r.positions())
	requireSQLState(t, ackPosition(c, "w", tw, all[3]), "SY400")
	require.NoError(t, ackPosition(c, "w", tw, all[0]))
	// Renewal by the same owner keeps the batch; a new owner has none.
	r, err = readChanges(c, "w", tw, 10, 1<<20)
	require.NoError(t, err)
	tw2, err := acquireLease(c, "w", "o1", 60)
	require.NoError(t, err)
	requireSQLState(t, ackPosition(c, "w", tw, all[1]), "SY412")
	require.NoError(t, ackPosition(c, "w", tw2, all[1]))
	_, err = c.Exec(context.Background(), `SELECT synchro.release_lease('w', $1)`, tw2)
	require.NoError(t, err)
	tw3, err := acquireLease(c, "w", "o2", 60)
	require.NoError(t, err)
	requireSQLState(t, ackPosition(c, "w", tw3, all[2]), "SY400")
	r, err = readChanges(c, "w", tw3, 10, 1<<20)
	require.NoError(t, err)
	require.Equal(t, all[2:], r.positions())
}

// A table registered (generation 2) and re-projected (generation 3) before the runner
// staged the first bootstrap: the first is subsumed, the relation is new to the
// stream, and its baseline rows (there before the registration, never changed) are
// not changes (docs/sql/consumer_groups.md: "Rows that existed when the stream started
// (the baseline) are not changes"; _bootstrap_catch_up: "A relation new to the stream
// gets none either"). The merge took the relation for one that streamed before (it is
// registered in generation 2) and wrote every baseline row as an upsert at C - 1.
func TestConsumerGroupNewRelationReprojectedBeforeStage(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	mustExec(t, db, `SELECT synchro.create_consumer_group('whole')`)
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)
	mustExec(t, db, `CREATE TABLE notes (id text PRIMARY KEY, body text);
		INSERT INTO notes VALUES ('b1', 'x'), ('b2', 'y'), ('b3', 'z');
		SELECT synchro.register_table('notes', 'notes');
		SELECT synchro.activate_registry();`)
	mustExec(t, db, `INSERT INTO notes VALUES ('n4', 'd')`)
	mustExec(t, db, `SELECT synchro.set_columns((SELECT relation_id FROM synchro.relation WHERE table_id = 'notes'),
		ARRAY['id']::name[]); SELECT synchro.activate_registry();`)
	startRunner(t, testRunnerConfig(t, db))
	waitBootstraps(t, db)
	requireNoQuarantine(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (99, 'a')`)
	eventually(t, 60*time.Second, "the later insert materialized", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.change WHERE table_id = 'items' AND pk = '99'`) == 1
	})
	txns, _ := reviewDrain(t, db, "whole")
	for _, x := range txns {
		for _, ch := range x {
			require.NotContains(t, []string{"notes:upsert:b1", "notes:upsert:b2", "notes:upsert:b3"}, ch,
				"a baseline row is not a change: %v", txns)
		}
	}
}

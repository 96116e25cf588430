package tests

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// DDL on registered tables and dependencies while the stream runs (schema drift), from
// an independent review (2026-12-04): two bugs fixed (each "was a bug (fixed)", red
// before its fix), the other scenarios found sound. ADR 001 ("Registry activation and relation drift"), CONTRACT.md "Source
// guards", docs/bootstrap.md "Drift: the way out without a reset", docs/runbook.md
// "Reading readiness". Every test runs against runnerSetup's items(id int8 PRIMARY
// KEY, owner text, v int, note text), registered with every column, scope "owner:".

// ddlLiveSQL is scope $1 of items from the live table (ONLY: never a child's rows),
// with the registered columns only.
const ddlLiveSQL = `
SELECT 'items', t.id::text, rv.version, jsonb_build_object('id', t.id, 'owner', t.owner, 'v', t.v, 'note', t.note)::text
  FROM ONLY items t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'items') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1`

// ddlEnv is runnerSetup with a running runner and one client that rebuilt the scopes.
type ddlEnv struct {
	db   *testdb.DB
	rr   *runningRunner
	reps map[string]replica
	curs map[string]string
}

var ddlScopes = []string{"owner:a", "owner:b"}

func newDdlEnv(t *testing.T, extra string) *ddlEnv {
	t.Helper()
	db := runnerSetup(t)
	if extra != "" {
		mustExec(t, db, extra)
	}
	rr := startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)
	catchUp(t, db)
	reps, curs := startScopes(t, db, "c", ddlScopes)
	return &ddlEnv{db: db, rr: rr, reps: reps, curs: curs}
}

// converge: the stream is not blocked, and every scope's incremental replica (pulled
// from the client's cursor) and a fresh rebuild equal the live table.
func (e *ddlEnv) converge(t *testing.T, live string, what string) {
	t.Helper()
	catchUp(t, e.db)
	requireNoQuarantine(t, e.db)
	for _, s := range ddlScopes {
		ch, cur := pullAll(t, e.db, "c", s, e.curs[s], 100)
		e.reps[s].apply(t, ch)
		e.curs[s] = cur
		want := liveScope(t, e.db, live, s)
		requireReplica(t, want, e.reps[s], what+": incremental "+s)
		fresh, _ := startScope(t, e.db, "d", s)
		requireReplica(t, want, fresh, what+": rebuild "+s)
	}
}

// ddlReadiness is readiness's registry row.
func ddlRegistry(t *testing.T, db *testdb.DB) readinessRow {
	t.Helper()
	rows, _ := readinessOf(t, db)
	return checkRow(rows, "registry")
}

// execErr runs sql and returns its error.
func execErr(db *testdb.DB, sql string, args ...any) error {
	_, err := db.Pool.Exec(context.Background(), sql, args...)
	return err
}

// ddlPoisoned reports the quarantine classes (empty: the stream is not blocked),
// after the runner caught up with everything committed so far (or poisoned).
func ddlSettle(t *testing.T, db *testdb.DB) []string {
	t.Helper()
	var target string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&target))
	eventually(t, 60*time.Second, "the runner to catch up or quarantine", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.progress WHERE processed_end_lsn >= $1::pg_lsn`, target) == 1 ||
			len(quarantines(t, db)) > 0
	})
	var out []string
	for _, q := range quarantines(t, db) {
		out = append(out, q.Class)
	}
	return out
}

// ---------------------------------------------------------------------------
// Key drift: the registered key column no longer carries the primary key.
// ---------------------------------------------------------------------------

// The fence refuses at the source every drift it can see (renamed or moved table,
// retyped column, replica identity other than DEFAULT: docs/errors.md 0A000), so that no
// write in a drifted shape reaches the WAL and blocks the stream for every scope
// (relation_drift poison, recoverable only by a stream reset). CONTRACT.md "Source
// guards": writes the stream cannot represent are refused at the source where
// PostgreSQL allows it. Was a bug (fixed): a key drift was not refused (the fence's
// fast path only compares the replica identity index's OID, and the full check only
// read relreplident); the full check now requires the registered key's primary key.
// (Still open, documented in docs/bootstrap.md "Not detected": the key column renamed
// and another added under its name keeps the index's OID, so the fast path runs.)
//
//   - primary key dropped: REPLICA IDENTITY DEFAULT with no primary key is no identity
//     at all; PostgreSQL still accepts INSERT (only UPDATE/DELETE need an identity).
//   - primary key moved to another column of the same table.
func TestDdlEdgeKeyDriftRefusedAtSource(t *testing.T) {
	for _, tc := range []struct {
		name, ddl, write string
	}{
		{"PrimaryKeyDropped",
			`ALTER TABLE items DROP CONSTRAINT items_pkey`,
			`INSERT INTO items (id, owner, v) VALUES (50, 'a', 5)`},
		{"PrimaryKeyMoved",
			`ALTER TABLE items ADD COLUMN alt int8; UPDATE items SET alt = id + 1000;
			 ALTER TABLE items DROP CONSTRAINT items_pkey, ADD PRIMARY KEY (alt)`,
			`INSERT INTO items (id, alt, owner, v) VALUES (50, 1050, 'a', 5)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := runnerSetup(t)
			startRunner(t, testRunnerConfig(t, db))
			waitStream(t, db)
			catchUp(t, db)
			mustExec(t, db, tc.ddl)
			reg := ddlRegistry(t, db)
			require.False(t, reg.OK, "readiness names the key drift: %s", reg.Detail)
			t.Logf("registry: %s", reg.Detail)

			err := execErr(db, tc.write)
			poison := ddlSettle(t, db)
			t.Logf("write after the DDL: %v; quarantine: %v", err, poison)
			// Either the fence refused the write (0A000, nothing in the WAL), or the write
			// was accepted and must not block the stream. An accepted write that
			// quarantines the stream is the bug.
			if err == nil {
				require.Empty(t, poison,
					"a write PostgreSQL accepted after a key drift reached the WAL and blocked the stream for every scope "+
						"(relation_drift, only a stream reset recovers); the fence could have refused it (0A000) as it "+
						"refuses a replica identity drift")
			} else {
				requireSQLState(t, err, "0A000")
				require.Empty(t, poison)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// A table rewrite (VACUUM FULL, CLUSTER, ADD COLUMN with a volatile default) is not
// drift.
// ---------------------------------------------------------------------------

// Was a bug (fixed): the fence inspected the statement's text for "COPY … FREEZE"
// whenever the relation's file changed since the fence was generated (COPY FREEZE needs a
// new file); now only when it changed in the writing transaction itself. A routine
// VACUUM FULL or CLUSTER changes the file, so afterwards every insert's statement text was
// matched against \mcopy\M.*\mfreeze\M: an ordinary INSERT whose text merely contains
// those two words (a literal value, a comment, a push of a note sent through the simple
// query protocol, where the JSON is inlined) is refused with 0A000 "COPY FREEZE into a
// registered relation is not supported", for ever (until the next activation
// regenerates the fence). docs/errors.md lists 0A000 for COPY … FREEZE only.
func TestDdlEdgeRewriteDoesNotRefuseOrdinaryInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newDdlEnv(t, "")
	db := e.db
	const note = `copy the list before the freeze`
	// Before any rewrite: accepted.
	mustExec(t, db, fmt.Sprintf(`INSERT INTO items (id, owner, note) VALUES (10, 'a', '%s')`, note))
	for i, ddl := range []string{
		`VACUUM FULL items`,
		`CLUSTER items USING items_pkey`,
		`ALTER TABLE items ADD COLUMN extra text DEFAULT md5(random()::text)`,
	} {
		t.Run(strings.Fields(ddl)[0], func(t *testing.T) {
			mustExec(t, db, ddl)
			rows, _ := readinessOf(t, db)
			require.True(t, checkRow(rows, "registry").OK, "a rewrite is not drift: %s", readinessString(rows))
			require.True(t, checkRow(rows, "triggers").OK, "%s", readinessString(rows))
			// An ordinary insert whose text holds the words.
			err := execErr(db, fmt.Sprintf(`INSERT INTO items (id, owner, note) VALUES (%d, 'a', '%s')`, 20+i, note))
			assert.NoError(t, err, "after %s an ordinary INSERT whose literal mentions copy and freeze is refused", ddl)
			// A push through the simple query protocol (pgbouncer setups, drivers that
			// interpolate): its mutations are in the statement's text.
			muts := pushJSON(t, pushIns(pushID(), "items", 30+i, pm{"owner": "a", "note": note}))
			var out string
			err = db.Pool.QueryRow(ctx, `SELECT synchro.push($1::text, $2::jsonb)::text`,
				pgx.QueryExecModeSimpleProtocol, "p", muts).Scan(&out)
			require.NoError(t, err, "after %s a push of a note mentioning copy and freeze fails whole, every retry alike", ddl)
			require.Contains(t, out, `"accepted"`)
		})
	}
	e.converge(t, ddlLiveSQL, "after the rewrites")
}

// ---------------------------------------------------------------------------
// Maintenance DDL is not drift: no false positive that blocks writes or the stream.
// ---------------------------------------------------------------------------

// Sound: under writers and a pulling client, VACUUM FULL, CLUSTER, CREATE INDEX
// CONCURRENTLY (plain and unique), ANALYZE, storage parameters, SET STATISTICS, a CHECK
// constraint added NOT VALID then validated, and ADD COLUMN … GENERATED ALWAYS AS …
// STORED (a rewrite; the new column is not registered) leave readiness's registry and
// triggers rows ok, refuse no write and block nothing; replicas equal the live table.
func TestDdlEdgeMaintenanceIsNotDrift(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, "")
	db := e.db
	w := startWriters(t, db, 2, 2*time.Millisecond, []string{"40P01", "40001"}, func(i int64) string {
		return fmt.Sprintf(`INSERT INTO items (id, owner, v) VALUES (%d, '%s', 1) ON CONFLICT (id) DO UPDATE SET v = items.v + 1;
			UPDATE items SET note = 'n%d' WHERE id = %d; DELETE FROM items WHERE id = %d`,
			100+i%40, []string{"a", "b"}[i%2], i, 100+(i+7)%40, 100+(i+13)%40)
	})
	for _, ddl := range []string{
		`VACUUM FULL items`,
		`CLUSTER items USING items_pkey`,
		`CREATE INDEX CONCURRENTLY items_note ON items (note)`,
		`CREATE UNIQUE INDEX CONCURRENTLY items_id_v ON items (id, v)`,
		`ANALYZE items`,
		`ALTER TABLE items SET (fillfactor = 70, autovacuum_enabled = false)`,
		`ALTER TABLE items ALTER COLUMN note SET STATISTICS 500`,
		`ALTER TABLE items ADD CONSTRAINT v_small CHECK (v < 1000000) NOT VALID`,
		`ALTER TABLE items VALIDATE CONSTRAINT v_small`,
		`ALTER TABLE items ADD COLUMN g int GENERATED ALWAYS AS (v * 2) STORED`,
		`VACUUM (FULL, ANALYZE) items`,
	} {
		mustExec(t, db, ddl)
		time.Sleep(30 * time.Millisecond)
		rows, _ := readinessOf(t, db)
		require.True(t, checkRow(rows, "registry").OK, "%s: %s", ddl, readinessString(rows))
		require.True(t, checkRow(rows, "triggers").OK, "%s: %s", ddl, readinessString(rows))
		require.True(t, checkRow(rows, "publication").OK, "%s: %s", ddl, readinessString(rows))
	}
	time.Sleep(100 * time.Millisecond)
	w.Stop()
	require.Positive(t, w.Attempts())
	e.converge(t, ddlLiveSQL, "after maintenance DDL")
	waitReady(t, db)
}

// ---------------------------------------------------------------------------
// Renamed registered columns.
// ---------------------------------------------------------------------------

// Sound: a registered column renamed on a live stream: every write is refused at the
// source (nothing reaches the WAL in the drifted shape), readiness names the drift
// (registry: columns), nothing is quarantined; renamed back, writes go on and the
// replicas equal the live table.
func TestDdlEdgeRenameRegisteredColumn(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, "")
	db := e.db
	mustExec(t, db, `ALTER TABLE items RENAME COLUMN note TO note2`)
	reg := ddlRegistry(t, db)
	require.False(t, reg.OK)
	require.Contains(t, reg.Detail, "columns")
	for _, w := range []string{
		`INSERT INTO items (id, owner, v) VALUES (40, 'a', 1)`,
		`UPDATE items SET v = 9 WHERE id = 1`,
		`DELETE FROM items WHERE id = 2`,
	} {
		err := execErr(db, w)
		require.Error(t, err, "%s after a registered column was renamed", w)
		t.Logf("%s: %v", w, err)
	}
	muts := pushJSON(t, pushIns(pushID(), "items", 41, pm{"owner": "a"}))
	_, err := pushRawOn(context.Background(), db.Pool, "p", muts)
	require.Error(t, err, "a push while a registered column is renamed")
	t.Logf("push: %v", err)
	require.Empty(t, ddlSettle(t, db))
	mustExec(t, db, `ALTER TABLE items RENAME COLUMN note2 TO note`)
	mustExec(t, db, `INSERT INTO items (id, owner, v, note) VALUES (40, 'a', 1, 'x'); UPDATE items SET v = 9 WHERE id = 1; DELETE FROM items WHERE id = 2`)
	e.converge(t, ddlLiveSQL, "renamed back")
	waitReady(t, db)
}

// Two registered columns of one type swap names (the scope rule's column among them):
// no type or name of the registration changed, so the fence and the runner see nothing;
// every row's values moved to the other column and its membership changed, without a
// row event. Readiness must name it (registry: columns, by attribute number), and the
// documented way out (docs/bootstrap.md: set_columns(relation_id, NULL) and activate,
// which re-projects) must bring every client back to the live table.
func TestDdlEdgeSwappedColumnNames(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `UPDATE items SET note = CASE id WHEN 1 THEN 'b' ELSE 'a' END; GRANT SELECT ON items TO synchro_operator`)
	db := e.db
	mustExec(t, db, `BEGIN;
		ALTER TABLE items RENAME COLUMN owner TO tmp;
		ALTER TABLE items RENAME COLUMN note TO owner;
		ALTER TABLE items RENAME COLUMN tmp TO note;
		COMMIT;`)
	reg := ddlRegistry(t, db)
	require.False(t, reg.OK, "readiness must name swapped columns: %s", reg.Detail)
	require.Contains(t, reg.Detail, "columns")
	require.Empty(t, ddlSettle(t, db))
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, NULL)`, itemsRelationID(t, db)))
	g := op.activate(t)
	waitRegistry(t, db, g)
	waitReady(t, db)
	// Clients whose cursor the activation made stale rebuild.
	for _, s := range ddlScopes {
		if _, err := pullRaw(db, "c", s, e.curs[s], 10); err != nil {
			requireSQLState(t, err, "SY409")
			p := rebuildWhenMaterialized(t, db, "c", s, 10000)
			e.reps[s] = replica{}
			e.reps[s].applyRebuild(t, p.Rows)
			e.curs[s] = p.Cursor
		}
	}
	mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES (60, 'a', 6)`)
	e.converge(t, ddlLiveSQL, "after the remedy")
}

// Sound: SET SCHEMA of a registered table: writes and pushes refused (0A000), readiness
// renamed, nothing quarantined; moved back, the stream goes on.
func TestDdlEdgeSetSchema(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE SCHEMA elsewhere`)
	db := e.db
	mustExec(t, db, `ALTER TABLE items SET SCHEMA elsewhere`)
	reg := ddlRegistry(t, db)
	require.False(t, reg.OK)
	require.Contains(t, reg.Detail, "renamed")
	requireSQLState(t, execErr(db, `INSERT INTO elsewhere.items (id, owner) VALUES (70, 'a')`), "0A000")
	requireSQLState(t, execErr(db, `UPDATE elsewhere.items SET v = 3 WHERE id = 1`), "0A000")
	_, err := pushRawOn(context.Background(), db.Pool, "p", pushJSON(t, pushIns(pushID(), "items", 71, pm{"owner": "a"})))
	require.Error(t, err)
	t.Logf("push: %v", err)
	require.Empty(t, ddlSettle(t, db))
	mustExec(t, db, `ALTER TABLE elsewhere.items SET SCHEMA public`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (70, 'a')`)
	e.converge(t, ddlLiveSQL, "moved back")
	waitReady(t, db)
}

// ---------------------------------------------------------------------------
// Inheritance, partitions, rules.
// ---------------------------------------------------------------------------

// Sound: the registered table becomes a child (ALTER TABLE items INHERIT base) and a
// parent (CREATE TABLE kid () INHERITS (items)). Writes through the parent reach items'
// rows and fire its fences; statements on items without ONLY also change kid's rows,
// which are not registered; TRUNCATE of the parent is refused (items' guard). A
// projection bootstrap (set_columns) reads items ONLY. Replicas equal items ONLY.
func TestDdlEdgeInheritance(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE TABLE base (id int8, owner text, v int NOT NULL DEFAULT 0, note text);
		GRANT SELECT ON items TO synchro_operator`)
	db := e.db
	mustExec(t, db, `ALTER TABLE items INHERIT base`)
	mustExec(t, db, `CREATE TABLE kid () INHERITS (items)`)
	mustExec(t, db, `INSERT INTO kid (id, owner, v) VALUES (1, 'a', 100), (500, 'a', 100), (501, 'b', 100)`)
	mustExec(t, db, `INSERT INTO base (id, owner) VALUES (900, 'a')`)
	mustExec(t, db, `INSERT INTO items (id, owner, v) VALUES (3, 'a', 3), (4, 'b', 4)`)
	mustExec(t, db, `UPDATE base SET v = v + 1 WHERE id IN (1, 3, 500)`)
	mustExec(t, db, `UPDATE items SET note = 'via items' WHERE owner = 'a'`)
	mustExec(t, db, `DELETE FROM base WHERE id = 4`)
	mustExec(t, db, `DELETE FROM items WHERE id = 501`)
	requireSQLState(t, execErr(db, `TRUNCATE base`), "0A000")
	rows, _ := readinessOf(t, db)
	require.True(t, checkRow(rows, "registry").OK, "%s", readinessString(rows))
	require.True(t, checkRow(rows, "publication").OK, "%s", readinessString(rows))
	e.converge(t, ddlLiveSQL, "writes through parent and child")

	// A projection bootstrap of items while it has a child.
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'owner', 'v'])`, itemsRelationID(t, db)))
	g := op.activate(t)
	waitRegistry(t, db, g)
	live := strings.Replace(ddlLiveSQL, `, 'note', t.note`, ``, 1)
	require.NotEqual(t, ddlLiveSQL, live)
	for _, s := range ddlScopes {
		fresh := rebuildWhenMaterialized(t, db, "d", s, 10000)
		r := replica{}
		r.applyRebuild(t, fresh.Rows)
		requireReplica(t, liveScope(t, db, live, s), r, "bootstrap with a child: "+s)
	}
	requireNoQuarantine(t, db)
}

// Sound: the registered table attached as a partition. Readiness names it
// (relation_kind); writes through the partitioned parent, rows moving out of items and
// into it, keep the replicas equal to items and block nothing; detached, readiness is
// ok again.
func TestDdlEdgeAttachPartition(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE TABLE pitems (id int8 NOT NULL, owner text, v int NOT NULL DEFAULT 0, note text) PARTITION BY LIST (owner);
		CREATE TABLE pother PARTITION OF pitems FOR VALUES IN ('z')`)
	db := e.db
	mustExec(t, db, `ALTER TABLE pitems ATTACH PARTITION items FOR VALUES IN ('a', 'b')`)
	reg := ddlRegistry(t, db)
	require.False(t, reg.OK)
	require.Contains(t, reg.Detail, "relation_kind")
	mustExec(t, db, `INSERT INTO pitems (id, owner, v) VALUES (80, 'a', 1), (81, 'z', 1), (82, 'b', 1)`)
	mustExec(t, db, `UPDATE pitems SET owner = 'z' WHERE id = 1`)  // leaves items
	mustExec(t, db, `UPDATE pitems SET owner = 'a' WHERE id = 81`) // enters items
	mustExec(t, db, `UPDATE pitems SET v = v + 1`)
	mustExec(t, db, `DELETE FROM pitems WHERE id = 82`)
	requireSQLState(t, execErr(db, `TRUNCATE pitems`), "0A000")
	e.converge(t, ddlLiveSQL, "attached")
	mustExec(t, db, `ALTER TABLE pitems DETACH PARTITION items`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (83, 'b')`)
	e.converge(t, ddlLiveSQL, "detached")
	waitReady(t, db)
}

// Sound: rules on a registered table. DO INSTEAD turns a delete into an update (a
// soft delete) and a conditional INSERT rule sends some rows elsewhere; the fences
// follow what really happened. push, whose statements RETURNING a rule cannot serve,
// fails whole (nothing written). Replicas equal the live table.
func TestDdlEdgeRules(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE TABLE sink (id int8, owner text);
		CREATE RULE soft AS ON DELETE TO items DO INSTEAD UPDATE items SET note = 'deleted' WHERE id = OLD.id;
		CREATE RULE away AS ON INSERT TO items WHERE NEW.owner = 'z' DO INSTEAD INSERT INTO sink VALUES (NEW.id, NEW.owner)`)
	db := e.db
	mustExec(t, db, `DELETE FROM items WHERE id = 1`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (90, 'z'), (91, 'a')`)
	mustExec(t, db, `UPDATE items SET v = 7 WHERE id = 91`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM sink`))
	var v string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = '2'`, itemsRelationID(t, db)).Scan(&v))
	raw, err := pushRawOn(context.Background(), db.Pool, "p", pushJSON(t, pushDel(pushID(), "items", 2, v)))
	t.Logf("push delete under a DO INSTEAD rule: %s %v", raw, err)
	if err == nil {
		out := pushParse(t, raw)
		require.NotEqual(t, "accepted", out[0].str(t, "status"), "an accepted delete that did not delete")
	}
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM items WHERE id = 2`))
	e.converge(t, ddlLiveSQL, "rules")
}

// ---------------------------------------------------------------------------
// Trigger firing modes.
// ---------------------------------------------------------------------------

// Sound: the fences set to ENABLE ALWAYS still fire under session_replication_role =
// replica (readiness ok, writes there keep the stream whole); the key guard set to
// ENABLE REPLICA fails readiness's triggers row.
func TestDdlEdgeTriggerFiringModes(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, "")
	db := e.db
	mustExec(t, db, `ALTER TABLE items ENABLE ALWAYS TRIGGER synchro_fence_insert;
		ALTER TABLE items ENABLE ALWAYS TRIGGER synchro_fence_update;
		ALTER TABLE items ENABLE ALWAYS TRIGGER synchro_fence_delete;
		ALTER TABLE items ENABLE ALWAYS TRIGGER synchro_guard_key;
		ALTER TABLE items ENABLE ALWAYS TRIGGER synchro_guard_truncate`)
	rows, _ := readinessOf(t, db)
	require.True(t, checkRow(rows, "triggers").OK, "%s", readinessString(rows))
	mustExec(t, db, `BEGIN; SET LOCAL session_replication_role = replica;
		INSERT INTO items (id, owner) VALUES (95, 'a'); UPDATE items SET v = 5 WHERE id = 1; DELETE FROM items WHERE id = 2;
		COMMIT`)
	e.converge(t, ddlLiveSQL, "always")
	mustExec(t, db, `ALTER TABLE items ENABLE REPLICA TRIGGER synchro_guard_key`)
	rows, _ = readinessOf(t, db)
	require.False(t, checkRow(rows, "triggers").OK, "a key guard that fires only under replica: %s", readinessString(rows))
	mustExec(t, db, `ALTER TABLE items ENABLE TRIGGER synchro_guard_key`)
	waitReady(t, db)
}

// ---------------------------------------------------------------------------
// Types: domains, composites, type modifiers.
// ---------------------------------------------------------------------------

// Sound: a registered column's domain gets a constraint NOT VALID that rows already
// there break. PostgreSQL keeps accepting updates of those rows' other columns; the
// stream materializes them (images are cast to the base type, no domain check), and a
// projection bootstrap of a table registered afterwards that holds such values reads
// them. Nothing quarantined, replicas equal the live tables.
func TestDdlEdgeDomainConstraintNotValid(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE DOMAIN dnote AS text;
		CREATE DOMAIN dint AS int;
		CREATE TABLE dd (id int8 PRIMARY KEY, owner text, d dnote, n dint, ds dnote[]);
		CREATE TABLE dd2 (id int8 PRIMARY KEY, owner text, d dnote);
		INSERT INTO dd VALUES (1, 'a', 'a long value', 50, '{"another long one"}'), (2, 'b', 'long too', 60, NULL);
		INSERT INTO dd2 VALUES (1, 'a', 'long long'), (2, 'b', 'x');
		SELECT synchro.register_table('dd', 'dd');
		SELECT synchro.add_scope_rule('dd', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		GRANT SELECT ON dd2 TO synchro_operator`)
	db := e.db
	live := ddlLiveSQL + `
UNION ALL
SELECT 'dd', t.id::text, rv.version, to_jsonb(t)::text
  FROM ONLY dd t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'dd') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1`
	mustExec(t, db, `ALTER DOMAIN dnote ADD CONSTRAINT short CHECK (length(VALUE) < 5) NOT VALID`)
	mustExec(t, db, `ALTER DOMAIN dint ADD CONSTRAINT small CHECK (VALUE < 10) NOT VALID`)
	requireSQLState(t, execErr(db, `INSERT INTO dd (id, owner, d) VALUES (3, 'a', 'too long')`), "23514")
	mustExec(t, db, `UPDATE dd SET owner = 'b' WHERE id = 1`)
	mustExec(t, db, `UPDATE dd SET owner = 'a' WHERE id = 2`)
	mustExec(t, db, `INSERT INTO dd (id, owner, d, n) VALUES (4, 'a', 'ok', 1)`)
	e.converge(t, live, "domain constraint NOT VALID")

	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.register_table('dd2', 'dd2')`))
	require.NoError(t, op.exec(`SELECT synchro.add_scope_rule('dd2', 'owner:', 'owner')`))
	g := op.activate(t)
	waitRegistry(t, db, g)
	mustExec(t, db, `UPDATE dd2 SET owner = 'b' WHERE id = 1`)
	live2 := live + `
UNION ALL
SELECT 'dd2', t.id::text, rv.version, to_jsonb(t)::text
  FROM ONLY dd2 t JOIN synchro.row_version rv
    ON rv.relation_id = (SELECT relation_id FROM synchro.relation WHERE table_id = 'dd2') AND rv.pk = t.id::text
 WHERE 'owner:' || t.owner = $1`
	catchUp(t, db)
	for _, s := range ddlScopes {
		fresh := rebuildWhenMaterialized(t, db, "d", s, 10000)
		r := replica{}
		r.applyRebuild(t, fresh.Rows)
		requireReplica(t, liveScope(t, db, live2, s), r, "bootstrap of domain values: "+s)
	}
	requireNoQuarantine(t, db)
}

// Sound: an unregistered composite column of a registered table whose type gets an
// attribute (ALTER TYPE … ADD ATTRIBUTE … CASCADE) and is dropped again: no drift,
// writes go on, nothing blocks.
func TestDdlEdgeCompositeAddAttribute(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `CREATE TYPE comp AS (x int, y text)`)
	db := e.db
	mustExec(t, db, `ALTER TABLE items ADD COLUMN c comp`)
	mustExec(t, db, `UPDATE items SET c = ROW(1, 'one') WHERE id = 1`)
	mustExec(t, db, `ALTER TYPE comp ADD ATTRIBUTE z int CASCADE`)
	mustExec(t, db, `UPDATE items SET c = ROW(2, 'two', 3), v = 4 WHERE id = 1; INSERT INTO items (id, owner, c) VALUES (97, 'a', ROW(1, 'a', 2))`)
	mustExec(t, db, `ALTER TYPE comp DROP ATTRIBUTE y CASCADE`)
	mustExec(t, db, `UPDATE items SET v = 5 WHERE id = 97`)
	rows, _ := readinessOf(t, db)
	require.True(t, checkRow(rows, "registry").OK, "%s", readinessString(rows))
	e.converge(t, ddlLiveSQL, "composite attribute")
}

// ---------------------------------------------------------------------------
// Row-level security added on a live registered table.
// ---------------------------------------------------------------------------

// ddlPushAs calls push as role (SET LOCAL ROLE) in its own transaction.
func ddlPushAs(t *testing.T, db *testdb.DB, role, client, muts string) (string, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL ROLE `+role)
	require.NoError(t, err)
	raw, err := pushRawOn(ctx, tx, client, muts)
	if err != nil {
		return "", err
	}
	require.NoError(t, tx.Commit(ctx))
	return raw, nil
}

// Sound (docs/security.md: push writes with the caller's privileges and row-level
// security; pull and rebuild serve the scopes' materialized rows whatever the policies):
// policies added on a live registered table make push's hidden row a conflict with nulls
// and a write outside WITH CHECK a 42501 rejection; direct writes and a projection
// bootstrap under FORCE ROW LEVEL SECURITY with a policy that hides every row (the
// pack's owner bypasses it) keep the replicas equal to the live table; nothing blocks.
func TestDdlEdgeRowLevelSecurityAdded(t *testing.T) {
	t.Parallel()
	e := newDdlEnv(t, `GRANT SELECT, INSERT, UPDATE, DELETE ON items TO synchro_app; GRANT SELECT ON items TO synchro_operator`)
	db := e.db
	mustExec(t, db, `ALTER TABLE items ENABLE ROW LEVEL SECURITY;
		CREATE POLICY app_a ON items TO synchro_app USING (owner = 'a') WITH CHECK (owner = 'a')`)
	catchUp(t, db)
	var v1, v2 string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT
		(SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = '1'),
		(SELECT version FROM synchro.row_version WHERE relation_id = $1 AND pk = '2')`, itemsRelationID(t, db)).Scan(&v1, &v2))
	raw, err := ddlPushAs(t, db, "synchro_app", "p", pushJSON(t,
		pushUpd(pushID(), "items", 1, v1, pm{"v": 11}),
		pushUpd(pushID(), "items", 2, v2, pm{"v": 22}),
		pushIns(pushID(), "items", 98, pm{"owner": "b"}),
		pushIns(pushID(), "items", 99, pm{"owner": "a"})))
	require.NoError(t, err)
	out := pushParse(t, raw)
	require.Equal(t, "accepted", out[0].str(t, "status"))
	require.Equal(t, "conflict", out[1].str(t, "status"), "a hidden row looks absent: %s", raw)
	require.JSONEq(t, `null`, string(out[1]["version"]))
	require.Equal(t, "rejected", out[2].str(t, "status"))
	require.Equal(t, "42501", out[2].str(t, "code"))
	require.Equal(t, "accepted", out[3].str(t, "status"))
	e.converge(t, ddlLiveSQL, "policies for the app")

	mustExec(t, db, `ALTER TABLE items FORCE ROW LEVEL SECURITY;
		CREATE POLICY none ON items AS RESTRICTIVE USING (false) WITH CHECK (false)`)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (100, 'b'); UPDATE items SET v = 3 WHERE id = 2`)
	op := newOperator(t, db)
	require.NoError(t, op.exec(`SELECT synchro.set_columns($1, ARRAY['id', 'owner', 'v'])`, itemsRelationID(t, db)))
	g := op.activate(t)
	waitRegistry(t, db, g)
	live := strings.Replace(ddlLiveSQL, `, 'note', t.note`, ``, 1)
	for _, s := range ddlScopes {
		fresh := rebuildWhenMaterialized(t, db, "d", s, 10000)
		r := replica{}
		r.applyRebuild(t, fresh.Rows)
		requireReplica(t, liveScope(t, db, live, s), r, "bootstrap under forced row-level security: "+s)
	}
	requireNoQuarantine(t, db)
}

// ---------------------------------------------------------------------------
// Dependencies.
// ---------------------------------------------------------------------------

// Sound: DDL on a registered dependency (a via rule's table) under writers: a rewrite
// (ADD COLUMN with a volatile default), VACUUM FULL and an unregistered column added and
// dropped are not drift; a registered column renamed refuses the dependency's writes
// (nothing reaches the WAL in the drifted shape), readiness names it, and renamed back
// the user: scopes equal the live tables.
func TestDdlEdgeDependencyDdl(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, `INSERT INTO project_members VALUES (1, 1, 'u1'), (2, 2, 'u2');
		INSERT INTO tasks (id, project_id, owner, title) SELECT g, g % 3, 'o', 't' FROM generate_series(1, 20) g;`)
	db := e.db
	scopes := []string{"user:u1", "user:u2", "user:u3"}
	reps, curs := startScopes(t, db, "c", scopes)
	w := startWriters(t, db, 1, 3*time.Millisecond, []string{"40P01", "40001", "42703"}, func(i int64) string {
		return fmt.Sprintf(`INSERT INTO project_members VALUES (%d, %d, 'u%d') ON CONFLICT (id) DO UPDATE SET project_id = excluded.project_id;
			UPDATE tasks SET v = v + 1 WHERE id = %d`, 10+i%5, i%3, 1+i%3, 1+i%20)
	})
	for _, ddl := range []string{
		`ALTER TABLE project_members ADD COLUMN extra text DEFAULT md5(random()::text)`,
		`VACUUM FULL project_members`,
		`ALTER TABLE project_members ADD COLUMN tmp int; ALTER TABLE project_members DROP COLUMN tmp`,
	} {
		mustExec(t, db, ddl)
		time.Sleep(30 * time.Millisecond)
		rows, _ := readinessOf(t, db)
		require.True(t, checkRow(rows, "registry").OK, "%s: %s", ddl, readinessString(rows))
	}
	mustExec(t, db, `ALTER TABLE project_members RENAME COLUMN user_id TO uid`)
	reg := ddlRegistry(t, db)
	require.False(t, reg.OK)
	require.Error(t, execErr(db, `INSERT INTO project_members VALUES (50, 1, 'u3')`))
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, ddlSettle(t, db))
	mustExec(t, db, `ALTER TABLE project_members RENAME COLUMN uid TO user_id`)
	time.Sleep(100 * time.Millisecond)
	w.Stop()
	write(t, db, `INSERT INTO project_members VALUES (51, 1, 'u3')`)
	requireNoQuarantine(t, db)
	for _, s := range scopes {
		ch, _ := pullAll(t, db, "c", s, curs[s], 100)
		reps[s].apply(t, ch)
		requireReplica(t, liveScope(t, db, liveScopeSQL, s), reps[s], "incremental "+s)
		fresh, _ := startScope(t, db, "d", s)
		requireReplica(t, liveScope(t, db, liveScopeSQL, s), fresh, "rebuild "+s)
	}
}

// TestDdlEdgeCopyFreezeAfterRewriteInSubtransaction: COPY FREEZE after a rewrite in
// a subtransaction of the same transaction (PostgreSQL accepts FREEZE there) is refused:
// the relation's pg_class row is the subtransaction's, in progress.
func TestDdlEdgeCopyFreezeAfterRewriteInSubtransaction(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	mustExec(t, db, `
		CREATE TABLE rv_frozen2 (id text PRIMARY KEY, owner text);
		SELECT synchro.register_table('rv_frozen2', 'rv_frozen2');
		SELECT synchro.activate_registry();`)
	c := reviewSession(t, db.URL, nil)
	_, err := c.Exec(ctx, `BEGIN; SAVEPOINT s; CLUSTER rv_frozen2 USING rv_frozen2_pkey`)
	require.NoError(t, err)
	_, err = c.PgConn().CopyFrom(ctx, strings.NewReader("k1\to\n"), `COPY rv_frozen2 (id, owner) FROM STDIN (FREEZE)`)
	_, _ = c.Exec(ctx, `ROLLBACK`)
	require.Error(t, err)
	require.Equal(t, "0A000", sqlstateOf(err), err.Error())
}

// A primary key with INCLUDE columns is still the registered single-column key: the
// fence's full check (a second change of a row in one transaction) accepts its writes.
func TestDdlEdgeKeyWithIncludeColumnsAccepted(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE inc (id int8, owner text, note text, CONSTRAINT inc_pkey PRIMARY KEY (id) INCLUDE (owner));
		SELECT synchro.register_table('inc', 'inc');
		SELECT synchro.add_scope_rule('inc', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		BEGIN; INSERT INTO inc VALUES (1, 'a', 'x'); UPDATE inc SET note = 'y' WHERE id = 1; COMMIT;`)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM inc WHERE note = 'y'`))
}

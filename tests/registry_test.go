package tests

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

func TestRegisterRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		ddl  string // creates public.t (and whatever else it needs)
		call string
		rule string // a fragment of the message naming the rule
	}{
		{"NoPrimaryKey", `CREATE TABLE t (id int8 UNIQUE NOT NULL)`, `SELECT synchro.register_table('t', 't')`, "primary key is required"},
		{"NullableUniqueNoKey", `CREATE TABLE t (id int8 UNIQUE)`, `SELECT synchro.register_table('t', 't')`, "primary key is required"},
		{"CompositeKey", `CREATE TABLE t (a int8, b int8, PRIMARY KEY (a, b))`, `SELECT synchro.register_table('t', 't')`, "composite primary keys"},
		{"DeferrableKey", `CREATE TABLE t (id int8 PRIMARY KEY DEFERRABLE)`, `SELECT synchro.register_table('t', 't')`, "deferrable primary keys"},
		{"FloatKey", `CREATE TABLE t (id float8 PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "primary key type float8"},
		{"NumericKey", `CREATE TABLE t (id numeric PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "primary key type numeric"},
		{"TimestampKey", `CREATE TABLE t (id timestamptz PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "primary key type timestamptz"},
		{"JSONKey", `CREATE TABLE t (id jsonb PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "primary key type jsonb"},
		{"Int2Key", `CREATE TABLE t (id int2 PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "primary key type int2"},
		{"ReplicaIdentityFull", `CREATE TABLE t (id int8 PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY FULL`, `SELECT synchro.register_table('t', 't')`, "replica identity must be DEFAULT (found FULL)"},
		{"ReplicaIdentityNothing", `CREATE TABLE t (id int8 PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY NOTHING`, `SELECT synchro.register_table('t', 't')`, "(found NOTHING)"},
		{"ReplicaIdentityIndex", `CREATE TABLE t (id int8 PRIMARY KEY, u int8 NOT NULL UNIQUE); ALTER TABLE t REPLICA IDENTITY USING INDEX t_u_key`, `SELECT synchro.register_table('t', 't')`, "(found USING INDEX)"},
		{"Partitioned", `CREATE TABLE t (id int8 PRIMARY KEY) PARTITION BY RANGE (id)`, `SELECT synchro.register_table('t', 't')`, "partitioned tables"},
		{"Partition", `CREATE TABLE p (id int8 PRIMARY KEY) PARTITION BY RANGE (id); CREATE TABLE t PARTITION OF p FOR VALUES FROM (0) TO (10)`, `SELECT synchro.register_table('t', 't')`, "partitions are not supported"},
		{"Unlogged", `CREATE UNLOGGED TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', 't')`, "unlogged"},
		{"View", `CREATE TABLE b (id int8 PRIMARY KEY); CREATE VIEW t AS SELECT * FROM b`, `SELECT synchro.register_table('t', 't')`, "only ordinary tables"},
		{"AlreadyRegistered", `CREATE TABLE t (id int8 PRIMARY KEY); SELECT synchro.register_table('t', 't')`, `SELECT synchro.register_table('t', 't2')`, "already registered"},
		{"TableIDTaken", `CREATE TABLE t (id int8 PRIMARY KEY); CREATE TABLE u (id int8 PRIMARY KEY); SELECT synchro.register_table('u', 't')`, `SELECT synchro.register_table('t', 't')`, "table_id is taken"},
		{"TableIDUppercase", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', 'Tasks')`, "table_id must match"},
		{"TableIDEmpty", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', '')`, "table_id must match"},
		{"TableIDNull", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', NULL)`, "table_id must match"},
		{"TableIDTooLong", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', 'a' || repeat('b', 63))`, "table_id must match"},
		{"TableIDDigitFirst", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.register_table('t', '1t')`, "table_id must match"},
		{"UnknownColumn", `CREATE TABLE t (id int8 PRIMARY KEY, a text)`, `SELECT synchro.register_table('t', 't', ARRAY['nope']::name[])`, "does not exist"},
		{"RepeatedColumn", `CREATE TABLE t (id int8 PRIMARY KEY, a text)`, `SELECT synchro.register_table('t', 't', ARRAY['a','a']::name[])`, "listed twice"},
		{"DependencyFloatKey", `CREATE TABLE t (id float4 PRIMARY KEY)`, `SELECT synchro.register_dependency('t')`, "primary key type float4"},
		{"DependencyIdentityFull", `CREATE TABLE t (id int8 PRIMARY KEY); ALTER TABLE t REPLICA IDENTITY FULL`, `SELECT synchro.register_dependency('t')`, "(found FULL)"},
		{"ScopeRuleUnknownTable", `CREATE TABLE t (id int8 PRIMARY KEY)`, `SELECT synchro.add_scope_rule('nope', 'p:', 'id')`, "unknown table_id"},
		{"ScopeRuleColumnNotRegistered", `CREATE TABLE t (id int8 PRIMARY KEY, a text, b text); SELECT synchro.register_table('t', 't', ARRAY['a']::name[])`, `SELECT synchro.add_scope_rule('t', 'p:', 'b')`, "registered column"},
		{"ScopeRuleViaNotDependency", `CREATE TABLE t (id int8 PRIMARY KEY, a int8); CREATE TABLE d (id int8 PRIMARY KEY, a int8, u text); SELECT synchro.register_table('t', 't')`, `SELECT synchro.add_scope_rule('t', 'u:', 'a', 'd', 'a', 'u')`, "via must be a registered dependency"},
		{"ScopeRuleViaIsSynced", `CREATE TABLE t (id int8 PRIMARY KEY, a int8); CREATE TABLE d (id int8 PRIMARY KEY, a int8, u text); SELECT synchro.register_table('t', 't'); SELECT synchro.register_table('d', 'd')`, `SELECT synchro.add_scope_rule('t', 'u:', 'a', 'd', 'a', 'u')`, "via must be a registered dependency"},
		{"ScopeRuleViaColumnNotRegistered", `CREATE TABLE t (id int8 PRIMARY KEY, a int8); CREATE TABLE d (id int8 PRIMARY KEY, a int8, u text); SELECT synchro.register_table('t', 't'); SELECT synchro.register_dependency('d', ARRAY['a']::name[])`, `SELECT synchro.add_scope_rule('t', 'u:', 'a', 'd', 'a', 'u')`, "via_match and via_scope must be registered columns"},
		{"ScopeRuleEmptyPrefix", `CREATE TABLE t (id int8 PRIMARY KEY); SELECT synchro.register_table('t', 't')`, `SELECT synchro.add_scope_rule('t', '', 'id')`, "scope_prefix"},
		{"ScopeRuleDuplicate", `CREATE TABLE t (id int8 PRIMARY KEY); SELECT synchro.register_table('t', 't'); SELECT synchro.add_scope_rule('t', 'p:', 'id')`, `SELECT synchro.add_scope_rule('t', 'p:', 'id')`, "same rule exists"},
		{"ActivateNothingStaged", ``, `SELECT synchro.activate_registry()`, "no registry generation is staged"},
		{"ActivateOverlappingPrefixes", `CREATE TABLE t (id int8 PRIMARY KEY, a text); SELECT synchro.register_table('t', 't'); SELECT synchro.add_scope_rule('t', 'p', 'id'); SELECT synchro.add_scope_rule('t', 'p:', 'a')`, `SELECT synchro.activate_registry()`, "must not be the beginning of another"},
		{"ActivateRenamedRelation", `CREATE TABLE t (id int8 PRIMARY KEY); SELECT synchro.register_table('t', 't'); ALTER TABLE t RENAME TO t2`, `SELECT synchro.activate_registry()`, "relation drift"},
		{"ActivateIdentityDrift", `CREATE TABLE t (id int8 PRIMARY KEY); SELECT synchro.register_table('t', 't'); ALTER TABLE t REPLICA IDENTITY FULL`, `SELECT synchro.activate_registry()`, "(found FULL)"},
		{"ActivateDroppedColumn", `CREATE TABLE t (id int8 PRIMARY KEY, a text); SELECT synchro.register_table('t', 't'); ALTER TABLE t DROP COLUMN a`, `SELECT synchro.activate_registry()`, "registered column"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := testdb.New(t)
			if tc.ddl != "" {
				mustExec(t, db, tc.ddl)
			}
			_, err := db.Pool.Exec(context.Background(), tc.call)
			pgErr := requireSQLState(t, err, "SY400")
			require.Contains(t, pgErr.Message, tc.rule)
		})
	}
}

func TestRegistryActivation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE SCHEMA app;
		CREATE TABLE app.projects (id int8 PRIMARY KEY, name text);
		CREATE TABLE app.members (id int8 PRIMARY KEY, project_id int8, user_id text, note text);
		CREATE TABLE app.tasks (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), project_id int8, title text, secret text);
		CREATE TABLE app.unregistered (id int8 PRIMARY KEY);
		INSERT INTO app.tasks (project_id, title) SELECT i % 3, 'pre ' || i FROM generate_series(1, 25) i;`)

	var taskRel, memberRel int64
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT synchro.register_table('app.tasks', 'tasks', ARRAY['project_id', 'title']::name[])`).Scan(&taskRel))
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT synchro.register_dependency('app.members', ARRAY['project_id', 'user_id']::name[])`).Scan(&memberRel))
	mustExec(t, db, `SELECT synchro.add_scope_rule('tasks', 'user:', 'project_id', 'app.members', 'project_id', 'user_id')`)
	mustExec(t, db, `SELECT synchro.add_scope_rule('tasks', 'project:', 'project_id')`)

	// Nothing is active before activation.
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM synchro.registry`).Scan(&n))
	require.Zero(t, n)

	var gen int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&gen))
	require.EqualValues(t, 1, gen)

	t.Run("RegistryView", func(t *testing.T) {
		type row struct {
			RelationID int64
			TableID    *string
			Kind       string
			Schema     string
			Table      string
			KeyColumn  string
			KeyType    string
			Columns    []string
			Rules      string
		}
		rows, err := db.Pool.Query(ctx, `SELECT relation_id, table_id, registration_kind, schema_name, table_name,
			key_column, key_type, columns::text[], scope_rules::text FROM synchro.registry ORDER BY relation_id`)
		require.NoError(t, err)
		var got []row
		for rows.Next() {
			var r row
			require.NoError(t, rows.Scan(&r.RelationID, &r.TableID, &r.Kind, &r.Schema, &r.Table, &r.KeyColumn,
				&r.KeyType, &r.Columns, &r.Rules))
			got = append(got, r)
		}
		require.NoError(t, rows.Err())
		require.Len(t, got, 2)
		require.Equal(t, taskRel, got[0].RelationID)
		require.Equal(t, "tasks", *got[0].TableID)
		require.Equal(t, "synced", got[0].Kind)
		require.Equal(t, []string{"app", "tasks", "id", "string"}, []string{got[0].Schema, got[0].Table, got[0].KeyColumn, got[0].KeyType})
		require.Equal(t, []string{"id", "project_id", "title"}, got[0].Columns, "key always included, attribute order")
		require.JSONEq(t, `[{"scope_prefix":"user:","column_name":"project_id","via":"app.members","via_match":"project_id","via_scope":"user_id"},
			{"scope_prefix":"project:","column_name":"project_id"}]`, got[0].Rules)
		require.Nil(t, got[1].TableID)
		require.Equal(t, "capture_dependency", got[1].Kind)
		require.Equal(t, "int64", got[1].KeyType)
	})

	t.Run("RelationIdentityRecorded", func(t *testing.T) {
		var relid uint32
		var keyPgType string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT relid, key_pg_type FROM synchro.relation WHERE relation_id = $1`, taskRel).Scan(&relid, &keyPgType))
		var want uint32
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT 'app.tasks'::regclass::oid`).Scan(&want))
		require.Equal(t, want, relid)
		require.Equal(t, "uuid", keyPgType)
	})

	t.Run("VersionsForExistingRows", func(t *testing.T) {
		var rows, versions, distinct int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM app.tasks`).Scan(&rows))
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT version) FROM synchro.row_version
			WHERE relation_id = $1 AND pk IN (SELECT id::text FROM app.tasks) AND NOT deleted`, taskRel).Scan(&versions, &distinct))
		require.Equal(t, 25, rows)
		require.Equal(t, rows, versions)
		require.Equal(t, rows, distinct)
	})

	t.Run("PublicationHoldsExactlyTheRegisteredRelations", func(t *testing.T) {
		rows, err := db.Pool.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = 'synchro' ORDER BY 1`)
		require.NoError(t, err)
		var got []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			got = append(got, s)
		}
		require.Equal(t, []string{"app.members", "app.tasks"}, got)
		var allTables, ins, upd, del, trunc bool
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT puballtables, pubinsert, pubupdate, pubdelete, pubtruncate
			FROM pg_publication WHERE pubname = 'synchro'`).Scan(&allTables, &ins, &upd, &del, &trunc))
		require.False(t, allTables)
		require.True(t, ins && upd && del && trunc)
	})

	t.Run("TriggersInstalledAndEnabled", func(t *testing.T) {
		for _, rel := range []string{"app.tasks", "app.members"} {
			rows, err := db.Pool.Query(ctx, `SELECT tgname, tgenabled FROM pg_trigger
				WHERE tgrelid = $1::regclass AND tgname LIKE 'synchro%' ORDER BY tgname`, rel)
			require.NoError(t, err)
			got := map[string]string{}
			for rows.Next() {
				var name, enabled string
				require.NoError(t, rows.Scan(&name, &enabled))
				got[name] = enabled
			}
			require.Equal(t, map[string]string{
				"synchro_fence_delete": "O", "synchro_fence_insert": "O", "synchro_fence_update": "O",
				"synchro_guard_key": "O", "synchro_guard_truncate": "O",
			}, got, rel)
		}
	})

	t.Run("SecondGenerationKeepsIdentitiesAndBumpsChangedPrefixOnly", func(t *testing.T) {
		var before map[string]int64 = map[string]int64{}
		rows, err := db.Pool.Query(ctx, `SELECT scope_prefix, rule_generation FROM synchro.scope_prefix`)
		require.NoError(t, err)
		for rows.Next() {
			var p string
			var g int64
			require.NoError(t, rows.Scan(&p, &g))
			before[p] = g
		}
		require.Equal(t, map[string]int64{"user:": 1, "project:": 1}, before)

		var projRel int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.register_table('app.projects', 'projects')`).Scan(&projRel))
		mustExec(t, db, `SELECT synchro.add_scope_rule('projects', 'project:', 'id')`)
		var gen2 int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&gen2))
		require.EqualValues(t, 2, gen2)

		after := map[string]int64{}
		rows, err = db.Pool.Query(ctx, `SELECT scope_prefix, rule_generation FROM synchro.scope_prefix`)
		require.NoError(t, err)
		for rows.Next() {
			var p string
			var g int64
			require.NoError(t, rows.Scan(&p, &g))
			after[p] = g
		}
		require.Equal(t, map[string]int64{"user:": 1, "project:": 2}, after)

		var states []string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT array_agg(state ORDER BY generation) FROM synchro.registry_generation`).Scan(&states))
		require.Equal(t, []string{"retired", "active"}, states)
		var ids []int64
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT array_agg(relation_id ORDER BY relation_id) FROM synchro.registry`).Scan(&ids))
		require.Equal(t, []int64{taskRel, memberRel, projRel}, ids)
	})

	t.Run("TableIDNeverReused", func(t *testing.T) {
		_, err := db.Pool.Exec(ctx, `SELECT synchro.register_table('app.unregistered', 'tasks')`)
		requireSQLState(t, err, "SY400")
	})
}

// The activation message sits at its position in source order: row events before it
// in the same transaction belong to the old generation, later ones to the new.
func TestActivationMessageOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE a (id int8 PRIMARY KEY);
		CREATE TABLE b (id int8 PRIMARY KEY);
		SELECT synchro.register_table('a', 'a');
		SELECT synchro.activate_registry();`)
	slot := createSlot(t, db)

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO a VALUES (1)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT synchro.register_table('b', 'b')`)
	require.NoError(t, err)
	var gen int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT synchro.activate_registry()`).Scan(&gen))
	_, err = tx.Exec(ctx, `INSERT INTO b VALUES (1)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO a VALUES (2)`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	ds := peek(t, db, slot)
	require.Equal(t, []string{
		"B",
		"I:a", "M:synchro.fence",
		"M:synchro.registry",
		"I:b", "M:synchro.fence",
		"I:a", "M:synchro.fence",
		"C",
	}, events(ds))
	var content string
	for _, d := range ds {
		if lm, ok := asMessage(d); ok && lm.Prefix == "synchro.registry" {
			require.True(t, lm.Transactional)
			content = string(lm.Content)
		}
	}
	var msg map[string]any
	require.NoError(t, json.Unmarshal([]byte(content), &msg))
	require.Len(t, msg["mac"], 32)
	delete(msg, "mac")
	require.Equal(t, map[string]any{"v": 2.0, "generation": 2.0, "previous": 1.0}, msg)
	var ok bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT $1::jsonb ->> 'mac' =
		synchro._message_mac('synchro.registry', synchro._message_body('synchro.registry', $1::jsonb))`, content).Scan(&ok))
	require.True(t, ok, "registry activation mac")
	require.EqualValues(t, 2, gen)
}

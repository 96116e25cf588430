package tests

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Each row event uses the registry generation activated last before it in source
// order, including an activation earlier in the same transaction.
func TestRunnerRegistryGenerationPerEvent(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := runnerSetup(t)
		startRunner(t, testRunnerConfig(t, db))
		waitStream(t, db)

		mustExec(t, db, `CREATE TABLE later (id int8 PRIMARY KEY, owner text)`)
		mustExec(t, db, `BEGIN;
		INSERT INTO items (id, owner) VALUES (10, 'a');
		SELECT synchro.register_table('later', 'later');
		SELECT synchro.add_scope_rule('later', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO later (id, owner) VALUES (1, 'a');
		INSERT INTO items (id, owner) VALUES (11, 'a');
		COMMIT;`)

		type ev struct {
			Ordinal int
			Pk      string
			RegGen  int64
		}
		var got []ev
		eventually(t, 10*time.Second, "the transaction to materialize", func() bool {
			rows, err := db.Pool.Query(ctx, `SELECT e.event_ordinal, e.pk, e.registry_generation
			FROM synchro.event e JOIN synchro.relation r USING (relation_id)
			WHERE (r.table_id = 'items' AND e.pk IN ('10', '11')) OR r.table_id = 'later'
			ORDER BY e.commit_lsn, e.event_ordinal`)
			require.NoError(t, err)
			defer rows.Close()
			got = got[:0]
			for rows.Next() {
				var e ev
				require.NoError(t, rows.Scan(&e.Ordinal, &e.Pk, &e.RegGen))
				got = append(got, e)
			}
			return len(got) == 3
		})
		require.Equal(t, []ev{{0, "10", 1}, {1, "1", 2}, {2, "11", 2}}, got)

		var regGen int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT registry_generation FROM synchro.progress`).Scan(&regGen))
		require.EqualValues(t, 2, regGen)
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT count(*) FROM synchro.effect WHERE scope = 'owner:a' AND table_id = 'later'`).Scan(&n))
		require.Equal(t, 1, n)
	})
}

// A runner configured with another publication than the registry keeps would read
// none of the registered relations' changes: it refuses to start.
func TestRunnerRefusesForeignPublication(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		cfg.Publication = "not_synchro"
		rr := startRunner(t, cfg)
		err := rr.wait(t, 10*time.Second)
		requireSQLState(t, err, "SY400")
		_, ok := runnerState(t, db)
		require.False(t, ok, "no stream was created")
	})
}

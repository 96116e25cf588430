package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Push fences accepted before the first start are covered by the baseline (the
// exported-snapshot copy), so their clients are not held in capture_pending forever;
// rows already there are served by rebuild with the versions push returned.
func TestBaselineCoversEarlierPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)

	var out string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.push('early', $1)::text`,
		`[{"id": "8b0b2b1e-2a8e-4a53-8c77-0a6f1e4c9f01", "table": "items", "op": "insert", "pk": 3,
		   "row": {"owner": "a", "v": 3}}]`).Scan(&out))
	var res struct {
		Results []struct {
			Status  string `json:"status"`
			Version string `json:"version"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "accepted", res.Results[0].Status)

	// No stream yet: the client cannot rebuild (SY503), and its fence is pending.
	_, err := db.Pool.Exec(ctx, `SELECT synchro.rebuild('early', 'owner:a')`)
	requireSQLState(t, err, "SY503")

	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)

	var coverage string
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT coverage FROM synchro.write_fence WHERE client_id = 'early'`).Scan(&coverage))
	require.Equal(t, "baseline", coverage)

	var page string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.rebuild('early', 'owner:a', NULL, 100)::text`).Scan(&page))
	var rb struct {
		Rows []struct {
			PK      json.RawMessage `json:"pk"`
			Version string          `json:"version"`
		} `json:"rows"`
		HasMore bool `json:"has_more"`
	}
	require.NoError(t, json.Unmarshal([]byte(page), &rb))
	require.False(t, rb.HasMore)
	require.Len(t, rb.Rows, 2, "rows 1 and 3 of owner a")
	require.JSONEq(t, `3`, string(rb.Rows[1].PK))
	require.Equal(t, res.Results[0].Version, rb.Rows[1].Version, "the baseline keeps the version push returned")
}

// A registry generation that adds a non-empty relation to a running stream bootstraps
// its projection (docs/bootstrap.md); an empty one joins and streams.
func TestActivationOnRunningStreamBootstraps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := runnerSetup(t)
	startRunner(t, testRunnerConfig(t, db))
	waitStream(t, db)

	mustExec(t, db, `CREATE TABLE filled (id int8 PRIMARY KEY, owner text); INSERT INTO filled VALUES (1, 'a');
		CREATE TABLE empty (id int8 PRIMARY KEY, owner text);`)
	// One simple-protocol call: the statements run in one implicit transaction.
	mustExec(t, db, `SELECT synchro.register_table('filled', 'filled');
		SELECT synchro.add_scope_rule('filled', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	eventually(t, 10*time.Second, "the bootstrapped row", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT count(*) FROM synchro.membership WHERE table_id = 'filled' AND scope = 'owner:a' AND pk = '1'`).Scan(&n))
		return n == 1
	})

	mustExec(t, db, `SELECT synchro.register_table('empty', 'empty');
		SELECT synchro.add_scope_rule('empty', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	mustExec(t, db, `INSERT INTO empty VALUES (7, 'a')`)
	eventually(t, 10*time.Second, "the new relation's effect", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT count(*) FROM synchro.effect WHERE table_id = 'empty' AND scope = 'owner:a' AND pk = '7'`).Scan(&n))
		return n == 1
	})
}

package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"
)

// Issue 13, "Done when": a sentinel value written into rows that push rejects, that
// conflict, or that are quarantined never appears in any error, log line, metric or
// synchro table (the accepted row's projection and effect are the only places a value
// may be, and this test writes no accepted row with it).
func TestSentinelNeverLeaks(t *testing.T) {
	t.Parallel()
	const sentinel, taken = "SENTINEL-4b9e21", "TAKEN-9c0d77"
	e := newAppEnv(t, `
		CREATE TABLE app.notes (id int8 PRIMARY KEY, owner text, body text UNIQUE,
		                        CONSTRAINT body_short CHECK (length(body) < 100))`, `
		SELECT synchro.register_table('app.notes', 'notes');
		SELECT synchro.add_scope_rule('notes', 'owner:', 'owner');
		SELECT synchro.activate_registry();`, nil)
	ctx := context.Background()
	e.appExec(t, `INSERT INTO app.notes VALUES (1, 'a', $1)`, taken)
	var version string
	eventually(t, 10*time.Second, "the first row's version", func() bool {
		return e.db.Pool.QueryRow(ctx, `SELECT version FROM synchro.projection WHERE pk = '1'`).Scan(&version) == nil
	})

	push := func(muts ...map[string]any) string {
		t.Helper()
		body, err := json.Marshal(muts)
		require.NoError(t, err)
		var out string
		require.NoError(t, e.app.QueryRow(ctx, `SELECT synchro.push('c1', $1::jsonb)::text`, string(body)).Scan(&out))
		return out
	}
	id := func(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }
	// Rejected: a unique violation (PostgreSQL's DETAIL would quote the value), a CHECK
	// violation; a conflict: a stale base version carrying the sentinel.
	res := push(
		map[string]any{"id": id(1), "table": "notes", "op": "insert", "pk": 2, "row": map[string]any{"owner": "a", "body": taken}},
		map[string]any{"id": id(2), "table": "notes", "op": "insert", "pk": 3,
			"row": map[string]any{"owner": sentinel, "body": sentinel + strings.Repeat("x", 200)}},
		map[string]any{"id": id(3), "table": "notes", "op": "update", "pk": 1, "base_version": "stale",
			"row": map[string]any{"owner": sentinel, "body": sentinel}},
	)
	require.Contains(t, res, `"rejected"`)
	require.Contains(t, res, `"conflict"`)
	require.NotContains(t, res, sentinel, "push results")
	// The unique violation carried a value of its own: make that one a sentinel too.
	res = push(map[string]any{"id": id(4), "table": "notes", "op": "insert", "pk": 4,
		"row": map[string]any{"owner": "b", "body": taken}})
	require.NotContains(t, res, taken, "a rejection's reason carries no value")

	// Quarantined: a write whose fence trigger the table's owner disabled.
	e.appExec(t, `ALTER TABLE app.notes DISABLE TRIGGER synchro_fence_insert`)
	e.appExec(t, `INSERT INTO app.notes VALUES (5, $1, $1)`, sentinel)
	e.appExec(t, `ALTER TABLE app.notes ENABLE TRIGGER synchro_fence_insert`)
	eventually(t, 10*time.Second, "the quarantine", func() bool { return len(quarantines(t, e.db)) == 1 })

	e.requireNoSentinel(t, sentinel)
	mfs, err := e.rr.metrics.Gather()
	require.NoError(t, err)
	var sb strings.Builder
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&sb, mf)
		require.NoError(t, err)
	}
	require.NotContains(t, sb.String(), sentinel, "metrics")
	require.NotContains(t, sb.String(), taken, "metrics")
}

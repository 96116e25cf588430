package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/client"
	"github.com/synchro/synchro/tests/testdb"
)

// liveItems is scope user:<owner> from the live table: key text -> row JSON (every
// column is registered).
func liveItems(t *testing.T, db *testdb.DB, owner string) map[string]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT 'items/' || id, to_jsonb(i)::text FROM public.items i WHERE owner = $1`, owner)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		require.NoError(t, rows.Scan(&k, &v))
		out[k] = canonJSON(t, []byte(v))
	}
	require.NoError(t, rows.Err())
	return out
}

func replicaItems(t *testing.T, c *client.Client, scope string) map[string]string {
	t.Helper()
	rows, err := c.Rows(context.Background(), scope)
	require.NoError(t, err)
	out := map[string]string{}
	for _, r := range rows {
		out[r.Table+"/"+r.PK] = canonJSON(t, r.Data)
	}
	return out
}

func canonJSON(t *testing.T, raw []byte) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(raw, &v))
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// Pages that stop on the byte budget (CONTRACT.md "Pull": has_more true before the
// row bound) are followed like any other: the reference client converges, through a
// rebuild and through pulls, with images larger than the budget among them.
func TestE2EByteBudgetPagesConverge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	_, err := db.Pool.Exec(ctx, e2eSchema)
	require.NoError(t, err)
	// A budget far below the row bound, for this database only (an owner-only setting).
	_, err = db.Pool.Exec(ctx, `INSERT INTO synchro.setting (name, value) VALUES ('page_byte_budget', '400')
		ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO public.items (id, owner, name)
		SELECT g, 'alice', repeat('n', (g * 37) % 300) FROM generate_series(10, 40) g;
		INSERT INTO public.items (id, owner, name) VALUES (41, 'alice', repeat('h', 2000))`)
	require.NoError(t, err)
	startRunner(t, db)

	// The budget is in effect: a rebuild page of at most 1000 rows stops early.
	var more bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (synchro.rebuild('probe', 'user:alice', NULL, 1000) ->> 'has_more')::boolean`).Scan(&more))
	require.True(t, more, "the first rebuild page stopped on the byte budget")

	c := serverClient(t, db, "budget", func(cfg *client.Config) {
		cfg.PageSize = 1000
		cfg.RebuildPageSize = 1000
	})
	require.NoError(t, c.Subscribe(ctx, "user:alice"))
	e2eSync(t, c, "user:alice")
	require.Equal(t, liveItems(t, db, "alice"), replicaItems(t, c, "user:alice"), "after the rebuild")

	// Changes in several transactions, large and small, then pull to the end.
	for i := 0; i < 6; i++ {
		_, err := db.Pool.Exec(ctx, fmt.Sprintf(`UPDATE public.items SET name = repeat('u', %d) WHERE id %% 6 = %d`, 50*i+1, i))
		require.NoError(t, err)
	}
	_, err = db.Pool.Exec(ctx, `DELETE FROM public.items WHERE id IN (12, 13);
		INSERT INTO public.items (id, owner, name) VALUES (50, 'alice', repeat('H', 3000));
		UPDATE public.items SET owner = 'bob' WHERE id = 41`)
	require.NoError(t, err)
	want := liveItems(t, db, "alice")
	syncUntil(t, c, "user:alice", func() bool {
		got := replicaItems(t, c, "user:alice")
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, "the replica equals the live scope")
}

package tests

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// The consumer-group and readiness interface exactly as CONTRACT.md ("Consumer groups",
// "Readiness", "Operator") names it: argument names and order (callers may pass them by
// name), defaults, result shapes, one function per name, and the view's columns in
// order. A renamed argument, a reordered column or an added overload is red here.
func TestContractSignatures(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	want := map[string][2]string{
		"create_consumer_group": {"name text, start text DEFAULT 'earliest'::text, table_ids text[] DEFAULT NULL::text[]", "void"},
		"acquire_lease":         {"name text, owner text, lease_seconds integer", "bigint"},
		"read_changes":          {"name text, token bigint, max_transactions integer, max_bytes integer", "jsonb"},
		"ack":                   {`name text, token bigint, "position" text`, "void"},
		"release_lease":         {"name text, token bigint", "void"},
		"remove_consumer_group": {"name text, confirm text", "void"},
		"readiness":             {"", "TABLE(check_name text, ok boolean, detail text)"},
		"ready":                 {"", "boolean"},
		"compact":               {"keep interval", "jsonb"},
		"retry_poison":          {"", "void"},
	}
	for name, sig := range want {
		rows, err := db.Pool.Query(ctx, `
			SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
			  FROM pg_proc p WHERE p.pronamespace = 'synchro'::regnamespace AND p.proname = $1`, name)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var s [2]string
			return s, r.Scan(&s[0], &s[1])
		})
		require.NoError(t, err)
		require.Equal(t, [][2]string{sig}, got, "synchro.%s", name)
	}

	rows, err := db.Pool.Query(ctx, `
		SELECT attname FROM pg_attribute WHERE attrelid = 'synchro.consumer_groups'::regclass AND attnum > 0
		 ORDER BY attnum LIMIT 8`)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"name", "checkpoint", "lag_transactions", "lag_seconds", "lease_owner",
		"lease_expires_at", "last_token", "removed_at"}, cols, "synchro.consumer_groups, the contract's columns first")

	var roles int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname = 'synchro_consumer' AND NOT rolcanlogin`).Scan(&roles))
	require.Equal(t, 1, roles, "the synchro_consumer role (a group role, no login)")
}

package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/tests/testdb"
)

// `synchro migrations export DIR` writes exactly the goose source, and `prelude` prints
// the prelude under the install lock, which applies to an empty database.
func TestMigrationsExportAndPrelude(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "synchro")
	e, _ := testEnv()
	require.Equal(t, 0, run(context.Background(), e, []string{"migrations", "export", dir}))
	src := synchro.GooseMigrations()
	names, err := fs.Glob(src, "*.sql")
	require.NoError(t, err)
	written, err := filepath.Glob(filepath.Join(dir, "*"))
	require.NoError(t, err)
	require.Len(t, written, len(names))
	for _, n := range names {
		want, err := fs.ReadFile(src, n)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(dir, n))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), n)
	}

	e, out := testEnv()
	require.Equal(t, 0, run(context.Background(), e, []string{"migrations", "prelude"}))
	require.True(t, strings.HasPrefix(out.String(), "BEGIN;\nSELECT pg_catalog.pg_advisory_xact_lock("), out.String())
	db := testdb.NewEmpty(t)
	_, err = db.Pool.Exec(context.Background(), out.String())
	require.NoError(t, err)
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_namespace WHERE nspname = 'synchro'`).Scan(&n))
	require.Equal(t, 1, n)

	require.Equal(t, 1, run(context.Background(), e, []string{"migrations", "export"}))
}

package tests

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// testdb.RequireLibrary, which tests needing an optional module (wal2json) call so that
// the version matrix's servers without it skip them: pgoutput ships with every server,
// so it never skips; a module no server has skips the test, with its name in the reason.
func TestRequireLibrary(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "pgoutput")

	var inner *testing.T
	t.Run("absent", func(t *testing.T) {
		inner = t
		testdb.RequireLibrary(t, "synchro_no_such_module")
		t.Error("RequireLibrary did not skip for a missing module")
	})
	require.True(t, inner.Skipped(), "a missing module skips the test")
}

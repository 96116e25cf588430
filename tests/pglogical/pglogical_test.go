// Package pglogical holds the tests against pglogical's output plugin (Debian's
// postgresql-15-pglogical, installed by .ci/run). The plugin needs
// shared_preload_libraries = pglogical, a server-wide setting, so the package has a
// private cluster of its own.
package pglogical

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/internal/pgcluster"
	"github.com/synchro/synchro/runner/decode/pglogical"
	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) {
	// The server refuses to start with a preload library it does not have (the
	// PostgreSQL 16-18 packages of the version matrix have no pglogical): then the
	// cluster starts without it and the test skips.
	bin := os.Getenv("SYNCHRO_PG_BIN")
	if bin == "" {
		bin = pgcluster.DefaultBinDir
	}
	if _, err := os.Stat(filepath.Join(bin, "..", "lib", "pglogical.so")); err != nil {
		testdb.Main(m)
		return
	}
	testdb.MainWithConf(m, map[string]string{"shared_preload_libraries": "pglogical"})
}

// The capability the runner refuses pglogical for (tests.TestDecoderCapabilityRefused:
// refused at start, before any slot) is real: on this server, with the plugin working, a transaction's insert reaches pglogical_output's stream and its
// transactional logical message does not (the plugin has no message callback).
func TestPglogicalOutputDropsTransactionalMessages(t *testing.T) {
	if testdb.Cluster() == nil {
		t.Skip("needs the private cluster with shared_preload_libraries = pglogical")
	}
	testdb.RequireLibrary(t, "pglogical")
	ctx := context.Background()
	db := plainDatabase(t)
	_, err := db.Exec(ctx, `
		CREATE EXTENSION pglogical;
		CREATE TABLE pt (id int PRIMARY KEY, note text);`)
	require.NoError(t, err, "postgresql-15-pglogical must be installed (.ci/run)")
	_, err = db.Exec(ctx, `SELECT pglogical.create_node(node_name := 'n', dsn := $1)`, db.Config().ConnString())
	require.NoError(t, err)
	_, err = db.Exec(ctx, `SELECT pglogical.replication_set_add_table('default', 'pt')`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `SELECT pg_create_logical_replication_slot('pgl_probe', $1)`, pglogical.Name)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), `SELECT pg_drop_replication_slot('pgl_probe')`) })
	_, err = db.Exec(ctx, `BEGIN;
		INSERT INTO pt VALUES (1, 'row-marker');
		SELECT pg_logical_emit_message(true, 'synchro.fence', 'message-marker');
		COMMIT;`)
	require.NoError(t, err)

	rows, err := db.Query(ctx, `SELECT convert_from(data, 'UTF8') FROM pg_logical_slot_peek_binary_changes(
		'pgl_probe', NULL, NULL, 'min_proto_version', '1', 'max_proto_version', '1',
		'startup_params_format', '1', 'proto_format', 'json', 'pglogical.replication_set_names', 'default')`)
	require.NoError(t, err)
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	all := strings.Join(payloads, "\n")
	require.Contains(t, all, `"action":"I"`, "the insert reaches the plugin's stream")
	require.Contains(t, all, "row-marker")
	require.NotContains(t, all, "message-marker", "the transactional message never does")
	require.NotContains(t, all, "synchro.fence")
}

// plainDatabase creates a database of its own on the private cluster, left for the
// cluster's removal at the end of the package: pglogical's manager worker stays
// connected to a database with a pglogical node, and DROP DATABASE (FORCE or not)
// waits for it.
func plainDatabase(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	name := "pglogical_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(testdb.AdminURL())
	require.NoError(t, err)
	cfg.Database = name
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close(context.Background())
		_ = admin.Close(context.Background())
	})
	return conn
}

package tests

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner/decode/wal2json"
	"github.com/synchro/synchro/tests/testdb"
)

// A wal2json runner restarted on its stream while an application transaction holds an
// xid (anywhere in the cluster) streams at once, as a pgoutput runner does: the start-up
// option probe, whose temporary slot waits for every such transaction, runs only
// before the stream exists. Red when the probe runs at every start (the restart stalls
// until the transaction ends; TestBootstrapSnapshotBoundary/decoder=wal2json hung on
// it).
func TestRunnerWal2jsonRestartBesideHeldTransaction(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	ctx := context.Background()
	db := runnerSetup(t)
	mustExec(t, db, `CREATE TABLE unrelated (x int)`)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	rr := startRunner(t, cfg)
	waitStream(t, db)
	waitAcked(t, db)
	require.NoError(t, rr.stop(t))
	waitRunnerGone(t, db)

	held, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = held.Rollback(ctx) }()
	_, err = held.Exec(ctx, `INSERT INTO unrelated VALUES (1)`) // holds an xid
	require.NoError(t, err)

	startRunner(t, cfg)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
	eventually(t, 60*time.Second, "the write after the restart materialized while the transaction is open", func() bool {
		return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '10'`) == 1
	})
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM pg_replication_slots
		WHERE slot_name LIKE 'synchro\_probe\_%' AND database = current_database()`), "no probe slot waits")
}

// What startRefusal relies on (runner/session.go): the output plugin checks
// START_REPLICATION's options before the stream starts, and answers an option it does
// not know with SQLSTATE 22023 to START_REPLICATION itself, so a session on a stream
// the start-up probe no longer checks is refused there (fatal), not later.
func TestStartReplicationRefusesUnknownOption(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	db := runnerSetup(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("replication", "database")
	u.RawQuery = q.Encode()
	repl, err := pgconn.Connect(ctx, u.String())
	require.NoError(t, err)
	defer repl.Close(context.Background())
	slot := "synchro_optcheck_" + randomSuffix()
	// Creating it waits for every transaction of the cluster that holds an xid.
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "wal2json",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication})
	require.NoError(t, err)
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	require.NoError(t, err)
	err = pglogrepl.StartReplication(ctx, repl, slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication, PluginArgs: append(wal2json.Options(), `"numeric-data-types-as-string" 'true'`)})
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "22023", pgErr.Code)
}

package tests

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/decode/wal2json"
	"github.com/synchro/synchro/tests/testdb"
)

// slotsOf counts the replication slots of the test's database.
func slotsOf(t *testing.T, db *testdb.DB) int {
	t.Helper()
	return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database()`)
}

// The stream records its plugin: a runner started with another decoder is refused at
// start with a message naming both, and readiness's slot check says so.
func TestDecoderMismatchRefused(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		// Both plugins take part: the stream's and the other one the runner is
		// restarted with (the matrix's PostgreSQL 16-18 packages have no wal2json,
		// and the capability refusal would answer first).
		testdb.RequireLibrary(t, "wal2json")
		t.Parallel()
		db := runnerSetup(t)
		cfg := testRunnerConfig(t, db)
		rr := startRunner(t, cfg)
		waitStream(t, db)
		waitAcked(t, db)
		require.NoError(t, rr.stop(t))
		waitRunnerGone(t, db)
		var plugin string
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT plugin FROM synchro.stream_generation WHERE state = 'active'`).Scan(&plugin))
		require.Equal(t, cfg.Decoder, plugin, "the stream records the plugin it was created with")

		other := "wal2json"
		if cfg.Decoder == "wal2json" {
			other = "pgoutput"
		}
		cfg.Decoder = other
		err, logs := fatalRunner(t, cfg)
		require.True(t, runner.IsFatal(err), "%v", err)
		require.ErrorContains(t, err, `the stream records output plugin "`+plugin+`"`)
		require.ErrorContains(t, err, `decodes with "`+other+`"`)
		require.Len(t, logs.lines("fatal state"), 1, "one log line names the fatal state")
		require.Empty(t, logs.lines("retrying"), "a fatal state is not retried")
		rows, _ := readinessOf(t, db)
		slot := checkRow(rows, "slot")
		require.False(t, slot.OK)
		require.Contains(t, slot.Detail, "runner_decoder_matches=false")
		require.Contains(t, slot.Detail, "plugin_matches=true", "the slot itself is the stream's")

		// With its own decoder again, the runner goes on where the stream is.
		cfg.Decoder = plugin
		startRunner(t, cfg)
		mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
		waitEffects(t, db, 1)
		require.Contains(t, checkRow(waitReady(t, db), "slot").Detail, "runner_decoder_matches=true")
	})
}

// A decoder lacking a capability Synchro needs is refused at start, before any slot
// exists, naming the capability: pglogical's output plugin (no message callback),
// wal2json format 1 (no per-change LSN; declared, not selectable).
func TestDecoderCapabilityRefused(t *testing.T) {
	t.Parallel()
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "pglogical"
	err, logs := fatalRunner(t, cfg)
	require.True(t, runner.IsFatal(err), "%v", err)
	require.ErrorContains(t, err, "cannot deliver transactional logical messages")
	c, ok := decode.ClassOf(err)
	require.True(t, ok)
	require.Equal(t, decode.ClassCapabilityUnsupported, c)
	require.Empty(t, logs.lines("retrying"), "a refused capability is not retried")
	require.Zero(t, slotsOf(t, db), "refused before any slot is created")
	_, exists := runnerState(t, db)
	require.False(t, exists, "no stream")

	err = decode.CheckCapabilities(wal2json.Plugin{FormatVersion: 1}, 150000)
	require.ErrorContains(t, err, "does not carry the commit lsn of each transaction and the lsn of each change")
}

// A wal2json build that rejects an option the decoder requires is refused by the
// option probe, on a temporary slot, before the stream's slot is created. wal2json 2.5
// (Debian's postgresql-15-wal2json) has no numeric-data-types-as-string (2.6): asking
// for it is the missing option.
func TestDecoderWal2jsonMissingOption(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	ctx := context.Background()
	db := runnerSetup(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)

	require.NoError(t, wal2json.ProbeOptions(ctx, conn, wal2json.Options()), "the options the decoder sends")
	err = wal2json.ProbeOptions(ctx, conn, append(wal2json.Options(), `"numeric-data-types-as-string" 'true'`))
	c, ok := decode.ClassOf(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, decode.ClassCapabilityUnsupported, c)
	require.ErrorContains(t, err, "rejects an option the decoder requires")
	require.Zero(t, slotsOf(t, db), "the probe's temporary slot is gone")
}

// wal2json 2.5 prints float4, float8 and numeric as bare JSON numbers and their NaN
// and Infinity as null, indistinguishable from NULL: a registered column of those
// types is refused at start, before the stream's slot exists (a domain over the type
// is carried exactly: TestDecoderDifferential).
func TestDecoderWal2jsonRefusesNumeric(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	db := testdb.New(t)
	mustExec(t, db, `
		CREATE TABLE prices (id int8 PRIMARY KEY, owner text, price numeric);
		SELECT synchro.register_table('prices', 'prices');
		SELECT synchro.activate_registry();`)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	err, _ := fatalRunner(t, cfg)
	require.True(t, runner.IsFatal(err), "%v", err)
	c, _ := decode.ClassOf(err)
	require.Equal(t, decode.ClassValueNotRepresentable, c)
	require.ErrorContains(t, err, "NaN or Infinity")
	require.Zero(t, slotsOf(t, db), "refused before the stream's slot is created")

	// Registered without the column, the same table streams.
	db2 := testdb.New(t)
	mustExec(t, db2, `
		CREATE TABLE prices (id int8 PRIMARY KEY, owner text, price numeric);
		SELECT synchro.register_table('prices', 'prices', ARRAY['owner']::name[]);
		SELECT synchro.add_scope_rule('prices', 'owner:', 'owner');
		SELECT synchro.activate_registry();`)
	cfg2 := testRunnerConfig(t, db2)
	cfg2.Decoder = "wal2json"
	startRunner(t, cfg2)
	waitStream(t, db2)
	mustExec(t, db2, `INSERT INTO prices VALUES (1, 'a', 'NaN')`)
	waitEffects(t, db2, 1)
}

// The float4/float8/numeric refusal is checked again at every wal2json session start:
// an activation that registers such a column on a running stream ends the session
// (the table set changed), and the next session's start refuses the column before
// anything of that activation's transaction is materialized.
func TestDecoderWal2jsonRefusesNumericLater(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	db := runnerSetup(t)
	cfg := testRunnerConfig(t, db)
	cfg.Decoder = "wal2json"
	logs := &syncLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rr := startRunner(t, cfg)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (10, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)

	mustExec(t, db, `
		CREATE TABLE prices (id int8 PRIMARY KEY, owner text, price float8);
		SELECT synchro.register_table('prices', 'prices');
		SELECT synchro.add_scope_rule('prices', 'owner:', 'owner');
		SELECT synchro.activate_registry();
		INSERT INTO prices VALUES (1, 'a', 'NaN');
		INSERT INTO items (id, owner) VALUES (11, 'a');`)
	err := rr.wait(t, 30*time.Second)
	require.True(t, runner.IsFatal(err), "%v", err)
	c, _ := decode.ClassOf(err)
	require.Equal(t, decode.ClassValueNotRepresentable, c)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '11'`)+
		countOf(t, db, `SELECT count(*) FROM synchro.projection p JOIN synchro.relation r USING (relation_id)
			WHERE r.table_id = 'prices'`), "nothing of the activation's transaction is materialized")
	require.Empty(t, quarantines(t, db), "a refusal at start, not a poison")
}

// The capability wal2json's format 1 is refused for (declared by the plugin package,
// refused by decode.CheckCapabilities before any slot: TestDecoderCapabilityRefused) is
// real: on this server's wal2json, format 1 with include-lsn gives one document per
// transaction whose changes carry no LSN of their own, where format 2 gives each
// change its lsn.
func TestWal2jsonFormat1HasNoChangeLSN(t *testing.T) {
	t.Parallel()
	testdb.RequireLibrary(t, "wal2json")
	ctx := context.Background()
	db := runnerSetup(t)
	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var slot string
	require.NoError(t, conn.QueryRow(ctx, `SELECT slot_name::text FROM pg_create_logical_replication_slot(
		'synchro_f1_' || pg_backend_pid(), 'wal2json', true)`).Scan(&slot))
	_, err = conn.Exec(ctx, `ANALYZE items`)
	require.NoError(t, err)
	// An ANALYZE here stands for the autovacuum one that made this test flaky: a
	// transaction that decodes to nothing.
	_, err = conn.Exec(ctx, `ANALYZE items`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO items (id, owner) VALUES (20, 'a'), (21, 'a')`)
	require.NoError(t, err)

	peek := func(format string) []map[string]any {
		rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL,
			'format-version', $2, 'include-lsn', 'true', 'include-xids', 'true')`, slot, format)
		require.NoError(t, err)
		docs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]any, error) {
			var s string
			if err := r.Scan(&s); err != nil {
				return nil, err
			}
			var m map[string]any
			return m, json.Unmarshal([]byte(s), &m)
		})
		require.NoError(t, err)
		return docs
	}
	// Format 1 also prints a document with an empty change list for every transaction
	// of this database that decoded to nothing (an autovacuum ANALYZE writes only
	// catalogs): only documents with changes count.
	var v1 []map[string]any
	for _, d := range peek("1") {
		changes, ok := d["change"].([]any)
		require.True(t, ok, "%v", d)
		if len(changes) > 0 {
			v1 = append(v1, d)
		}
	}
	require.Len(t, v1, 1, "format 1: one document for the transaction")
	changes := v1[0]["change"].([]any)
	require.GreaterOrEqual(t, len(changes), 2, "the inserts, their row versions and fences")
	for _, c := range changes {
		require.NotContains(t, c.(map[string]any), "lsn", "a format 1 change has no lsn")
	}
	v2 := peek("2")
	var inserts int
	for _, d := range v2 {
		if d["action"] == "I" && d["table"] == "items" {
			inserts++
			require.Contains(t, d, "lsn", "a format 2 change has its lsn")
		}
	}
	require.Equal(t, 2, inserts)
}

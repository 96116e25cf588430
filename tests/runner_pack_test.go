package tests

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro"
	"github.com/synchro/synchro/runner"
	"github.com/synchro/synchro/tests/testdb"
)

// materializeRenamed is what a deploy of a later release that changed the
// materialization functions' signatures does to a runner of this release left running:
// the functions it calls (named with the suffix from) are renamed to the suffix to
// ("", "_gone" takes them away; "_gone", "" puts them back).
func materializeRenamed(from, to string) string {
	return fmt.Sprintf(`DO $$
		DECLARE r record;
		BEGIN
		  FOR r IN SELECT p.oid::regprocedure AS f, p.proname FROM pg_proc p
		            WHERE p.pronamespace = 'synchro'::regnamespace
		              AND p.proname IN ('materialize_batch%[1]s', 'materialize_prepare%[1]s', 'materialize_write%[1]s') LOOP
		    EXECUTE format('ALTER FUNCTION %%s RENAME TO %%I', r.f, left(r.proname, length(r.proname) - %[2]d) || '%[3]s');
		  END LOOP;
		END $$`, from, len(from), to)
}

// loggedConfig is testRunnerConfig with the runner's log kept for the test to read.
func loggedConfig(t *testing.T, db *testdb.DB) (runner.Config, *syncLog) {
	logs := &syncLog{}
	cfg := testRunnerConfig(t, db)
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	return cfg, logs
}

// A runner runs only against the pack of its own release (docs/install.md). One whose
// database records a newer migration than its release ships starts no stream; one
// left running while a deploy migrated the pack past it is refused by the pack before
// the new functions read what it staged (synchro.runner_stage_open, SYW02), and takes
// the failures of functions that changed under it for what they are, the release
// mismatch, never a poison of the source transaction (which blocked the stream until
// an operator's retry, and the retry failed again): it waits, and once the pack
// matches a runner (here: the same one) materializes everything exactly once.
func TestRunnerOlderThanThePack(t *testing.T) {
	// Batched, the failed batch is re-run one transaction at a time by the next session,
	// and that session's start refuses the pack; materializing each transaction alone,
	// the failure reaches the quarantine's path, which asks the pack first.
	for _, perTxn := range []bool{false, true} {
		t.Run(fmt.Sprintf("per_transaction=%v", perTxn), func(t *testing.T) {
			t.Parallel()
			olderThanThePack(t, perTxn)
		})
	}
}

func olderThanThePack(t *testing.T, perTxn bool) {
	db := runnerSetup(t)
	// A newer release's migration, as goose records it.
	newer := synchro.PackVersion() + 1
	markNewer := fmt.Sprintf(`INSERT INTO synchro.goose_version (version_id, is_applied) VALUES (%d, true)`, newer)
	unmarkNewer := fmt.Sprintf(`DELETE FROM synchro.goose_version WHERE version_id = %d`, newer)
	refusal := "newer than this runner's release"

	// A first start on a newer pack: nothing is streamed, not even the baseline.
	mustExec(t, db, markNewer)
	cfg, logs := loggedConfig(t, db)
	cfg.PerTransaction = perTxn
	startRunner(t, cfg)
	eventually(t, 10*time.Second, "the runner to refuse the newer pack twice", func() bool {
		return len(logs.lines(refusal)) >= 2
	})
	_, streamed := runnerState(t, db)
	require.False(t, streamed, "no stream on a pack newer than the runner")

	// The pack at the runner's release: it goes on.
	mustExec(t, db, unmarkNewer)
	waitStream(t, db)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (3, 'a')`)
	waitEffects(t, db, 1)
	waitAcked(t, db)
	refused := len(logs.lines(refusal))

	// A deploy migrates the pack past the running runner, and the functions it calls
	// would still succeed: the pack refuses the session (SYW02) before it reads
	// anything staged, and the runner waits.
	refused = len(logs.lines(refusal))
	mustExec(t, db, markNewer)
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (4, 'a')`)
	eventually(t, 20*time.Second, "the pack to refuse the running runner", func() bool {
		return len(logs.lines("runner_release")) >= 1 && len(logs.lines(refusal)) > refused+1
	}, func() { t.Log(logs.String()) })
	require.Empty(t, quarantines(t, db), "a release mismatch is no poison")
	require.Len(t, effects(t, db), 1, "row 4 waits for a runner of the pack's release")
	mustExec(t, db, unmarkNewer)
	got := waitEffects(t, db, 2)
	require.Equal(t, "4", got[1].PK)
	waitAcked(t, db)
	refused = len(logs.lines(refusal))

	// A deploy that changed the functions it calls, in the same transaction: the next
	// source transaction's materialization fails.
	mustExec(t, db, markNewer+`; `+materializeRenamed("", "_gone"))
	mustExec(t, db, `INSERT INTO items (id, owner) VALUES (5, 'a')`)
	failed := "re-running it one transaction at a time"
	if perTxn {
		failed = "not filed as poison"
	}
	eventually(t, 20*time.Second, "the materialization to fail, then the pack refused", func() bool {
		return len(logs.lines(failed)) >= 1 && len(logs.lines(refusal)) > refused+1
	}, func() { t.Log(logs.String()) })
	require.Empty(t, quarantines(t, db), "a release mismatch is no poison")
	st, _ := runnerState(t, db)
	require.Nil(t, st.PoisonCmt, "the stream is not blocked")
	require.Len(t, effects(t, db), 2, "row 5 waits")

	// The matching release in place: row 5 is materialized, once.
	mustExec(t, db, materializeRenamed("_gone", "")+`; `+unmarkNewer)
	got = waitEffects(t, db, 3)
	require.Equal(t, "5", got[2].PK)
	waitAcked(t, db)
	require.Empty(t, quarantines(t, db))
	for _, pk := range []string{"3", "4", "5"} {
		require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.event WHERE pk = $1`, pk), "row %s", pk)
	}
}

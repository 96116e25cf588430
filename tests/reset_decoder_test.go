package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// A stream reset is how a stream switches decoders (docs/decoders.md): the runner that
// serves the reset creates the candidate slot with its own decoder and catches up
// through it; activation makes the candidate's plugin the new stream generation's.
// Before the reset, a runner with the other decoder is refused (TestDecoderMismatchRefused);
// with the reset open it serves it; after activation the old decoder is refused.
func TestResetSwitchesDecoder(t *testing.T) {
	eachDecoder(t, func(t *testing.T) {
		// Both plugins take part (the version matrix's PostgreSQL 16-18 have no wal2json).
		testdb.RequireLibrary(t, "wal2json")
		// Not parallel: a reset creates a slot with an exported snapshot, which waits for
		// every xid-holding transaction of the cluster (TestResetRecoversTruncatePoison).
		ctx := context.Background()
		e := newSyncEnv(t, "")
		db := e.db
		from := e.cfg.Decoder
		to := "wal2json"
		if from == "wal2json" {
			to = "pgoutput"
		}
		write(t, db, `INSERT INTO project_members VALUES (1, 1, 'u1');
			INSERT INTO tasks (id, project_id, owner, title) VALUES (1, 1, 'o1', 'one'), (2, 1, 'o2', 'two');
			INSERT INTO notes VALUES ('n1', 'o1', 'first')`)
		waitAcked(t, db)
		var oldSlot string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT slot_name FROM synchro.stream_generation WHERE state = 'active'`).Scan(&oldSlot))
		e.stopRunner(t)

		// The marker waits for this lock (runner_reset_mark takes write_fence in SHARE
		// mode; holding ROW EXCLUSIVE takes no xid, so the candidate slot's snapshot does
		// not wait for it): what is committed meanwhile is inside the catch-up's range.
		hold, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = hold.Rollback(ctx) }()
		_, err = hold.Exec(ctx, `LOCK TABLE synchro.write_fence IN ROW EXCLUSIVE MODE`)
		require.NoError(t, err)

		op := newOperator(t, db)
		id := op.begin(t, "switch the decoder to "+to)
		e.cfg.Decoder = to
		e.startRunner(t)
		// Writes while the reset stages and catches up through the new plugin.
		for i := 10; i < 20; i++ {
			mustExec(t, db, fmt.Sprintf(`INSERT INTO tasks (id, project_id, owner, title) VALUES (%d, 1, 'o1', 'w');
				UPDATE notes SET body = 'edit %d' WHERE id = 'n1'`, i, i))
		}
		eventually(t, 120*time.Second, "the catch-up waiting to write its marker", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE d.datname = current_database() AND l.relation = 'synchro.write_fence'::regclass AND NOT l.granted`) > 0
		})
		// Inside the catch-up: a forged registry activation of a generation the table set
		// does not know (anyone may emit one). wal2json's decoder follows only authentic
		// activations (their MAC is the server key's): the catch-up goes on past it.
		mustExec(t, db, `SELECT pg_logical_emit_message(true, 'synchro.registry',
			'{"v":2,"generation":99,"previous":1,"mac":"00000000000000000000000000000000"}');
			INSERT INTO tasks (id, project_id, owner, title) VALUES (30, 1, 'o1', 'next to the forgery')`)
		require.NoError(t, hold.Rollback(ctx))
		s := op.waitPhase(t, id, "ready")
		require.NotNil(t, s.CandidateSlot)
		var candidatePlugin string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT plugin FROM pg_replication_slots WHERE slot_name = $1`,
			*s.CandidateSlot).Scan(&candidatePlugin))
		require.Equal(t, to, candidatePlugin, "the candidate slot is created with the serving runner's decoder")
		require.NoError(t, op.exec(`SELECT synchro.activate_reset($1)`, id))

		eventually(t, 60*time.Second, "cleanup of the old slot", func() bool {
			return countOf(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, oldSlot) == 0 &&
				countOf(t, db, `SELECT count(*) FROM synchro.reset WHERE cleaned_at IS NOT NULL`) == 1
		})
		var streamPlugin, slotPlugin string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT g.plugin, s.plugin FROM synchro.stream_generation g
			JOIN pg_replication_slots s ON s.slot_name = g.slot_name WHERE g.state = 'active'`).Scan(&streamPlugin, &slotPlugin))
		require.Equal(t, to, streamPlugin, "the new stream generation records the candidate's plugin")
		require.Equal(t, to, slotPlugin)

		// The new stream streams through the new decoder, and readiness is back.
		write(t, db, `INSERT INTO tasks (id, project_id, owner, title) VALUES (99, 1, 'o1', 'after the switch')`)
		eventually(t, 30*time.Second, "the write after the switch materialized", func() bool {
			return countOf(t, db, `SELECT count(*) FROM synchro.effect WHERE pk = '99'`) > 0
		})
		require.Contains(t, checkRow(waitReady(t, db), "slot").Detail, "runner_decoder_matches=true")
		for _, scope := range []string{"owner:o1", "owner:o2", "user:u1"} {
			r, _, _ := onePageRebuild(t, db, "c-"+scope, scope)
			requireReplica(t, liveScope(t, db, liveScopeSQL, scope), r, scope)
		}

		// The old decoder is refused on the new stream.
		e.stopRunner(t)
		cfg := e.cfg
		cfg.Decoder = from
		err, _ = fatalRunner(t, cfg)
		require.ErrorContains(t, err, `the stream records output plugin "`+to+`"`)
	})
}

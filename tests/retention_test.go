package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// Bounded storage (issue 12 item 4; docs/retention.md): compaction in batches that each
// commit, trimmed replay ledgers, retire_client and the outcome age limit.

// waitAckedPast waits until the runner acknowledged the slot past the current WAL
// insert position: every source transaction committed before it is materialized,
// durable and never sent again.
func waitAckedPast(t *testing.T, db *testdb.DB) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
	target, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the acknowledgement to pass "+s, func() bool {
		p, ok := runnerState(t, db)
		return ok && lsnOf(t, p.Acked) >= target
	})
	return target
}

// setSetting writes a retention setting as the pack's owner.
func setSetting(t *testing.T, db *testdb.DB, name, value string) {
	t.Helper()
	mustExec(t, db, `UPDATE synchro.setting SET value = $2 WHERE name = $1`, name, value)
}

// mutationID is a UUID unique within the test: tag and n.
func mutationID(tag, n int) string {
	return fmt.Sprintf("00000000-%04x-4000-8000-%012x", tag, n)
}

type pushResult struct {
	ID      string          `json:"id"`
	Status  string          `json:"status"`
	Version string          `json:"version"`
	Code    string          `json:"code"`
	Row     json.RawMessage `json:"row"`
}

// pushRaw calls synchro.push and returns the raw result text.
func pushRaw(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, clientID string, muts []map[string]any) (string, error) {
	b, err := json.Marshal(muts)
	if err != nil {
		return "", err
	}
	var out string
	err = q.QueryRow(ctx, `SELECT synchro.push($1, $2::jsonb)::text`, clientID, string(b)).Scan(&out)
	return out, err
}

func mustPush(t *testing.T, db *testdb.DB, clientID string, muts []map[string]any) (string, []pushResult) {
	t.Helper()
	raw, err := pushRaw(context.Background(), db.Pool, clientID, muts)
	require.NoError(t, err)
	var res struct {
		Results []pushResult `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &res))
	require.Len(t, res.Results, len(muts))
	return raw, res.Results
}

// callAs runs one statement as role on a fresh transaction and returns its text result.
func callAs(ctx context.Context, db *testdb.DB, role, sql string, args ...any) (string, error) {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
		return "", err
	}
	var out string
	if err := tx.QueryRow(ctx, sql, args...).Scan(&out); err != nil {
		return "", err
	}
	return out, tx.Commit(ctx)
}

// compactAll runs CALL synchro.compact_all(keep) as synchro_operator on a session of its
// own (a procedure that commits must not run inside a transaction block).
func compactAll(ctx context.Context, db *testdb.DB, keep string) (map[string]any, error) {
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET ROLE synchro_operator`); err != nil {
		return nil, err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `RESET ROLE`) }()
	var raw string
	if err := conn.QueryRow(ctx, `CALL synchro.compact_all($1::interval)`, keep).Scan(&raw); err != nil {
		return nil, err
	}
	var rep map[string]any
	return rep, json.Unmarshal([]byte(raw), &rep)
}

// tableCounts is the row count of every table of schema synchro.
func tableCounts(t *testing.T, db *testdb.DB) map[string]int {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT c.relname FROM pg_class c
		WHERE c.relnamespace = 'synchro'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]int{}
	for _, n := range names {
		out[n] = countOf(t, db, `SELECT count(*) FROM synchro.`+pgx.Identifier{n}.Sanitize())
	}
	return out
}

// pullOrRebuild brings a replica to the end of its scope: incremental pull from cur, or
// a rebuild when the cursor is below the horizon (SY409). It reports whether it rebuilt.
func pullOrRebuild(t *testing.T, db *testdb.DB, clientID, scope string, rep replica, cur string) (replica, string, bool) {
	t.Helper()
	if cur != "" {
		var got []change
		cursor := cur
		var err error
		for {
			var p pullPage
			p, err = pullRaw(db, clientID, scope, cursor, 7)
			if err != nil {
				break
			}
			got = append(got, p.Changes...)
			cursor = p.Cursor
			if !p.HasMore {
				break
			}
		}
		if err == nil {
			rep.apply(t, got)
			return rep, cursor, false
		}
		requireSQLState(t, err, "SY409")
	}
	r, c := startScope(t, db, clientID, scope)
	return r, c, true
}

// pusher is a client that pushes into its own key range and remembers the versions it
// was handed.
type pusher struct {
	id   string
	tag  int
	n    int
	rows map[int64]string // key -> current version
	born map[int64]int    // key -> round of its insert
}

func (p *pusher) mutation(op string, key int64, row map[string]any) map[string]any {
	p.n++
	m := map[string]any{"id": mutationID(p.tag, p.n), "table": "tasks", "op": op, "pk": key}
	if op != "insert" {
		m["base_version"] = p.rows[key]
	}
	if op != "delete" {
		m["row"] = row
	}
	return m
}

// A long steady workload: direct writes through the runner, pushes of long-lived
// clients, a short-lived client per round that is then retired, scope clients pulling
// (rebuilding when compaction passed their cursor), a consumer group reading and
// acknowledging every round (its change record) and compaction scheduled
// concurrently all along. The live data is the same size every round, so every table
// of schema synchro must stay the same size too: sampled after each round (once the
// runner acknowledged it and one more compaction ran), no count grows with the run.
// Without a retention rule for a table, its count grows by about a round's volume per
// round and the comparison fails. The retention settings are set to zero so that what
// must go goes at the next compaction; their meaning is tested below with aged rows.
func TestRetentionSteadyWorkloadIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	setSetting(t, db, "outcome_retention", "0 seconds")
	setSetting(t, db, "retired_client_retention", "0 seconds")
	setSetting(t, db, "compact_batch_rows", "50") // several batches per pass
	// A consumer group keeps up with the stream: its change record (synchro.change) is
	// written by every materialization and must be compacted with the rest.
	mustExec(t, db, `SELECT synchro.create_consumer_group('indexer')`)
	groupDelivered := 0
	consumeGroup := func() {
		t.Helper()
		var tok int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.acquire_lease('indexer', 'steady', 60)`).Scan(&tok))
		for {
			var raw string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro.read_changes('indexer', $1, 10000, 1 << 24)::text`, tok).Scan(&raw))
			var r groupRead
			require.NoError(t, json.Unmarshal([]byte(raw), &r))
			if len(r.Transactions) > 0 {
				groupDelivered += len(r.Transactions)
				mustExec(t, db, `SELECT synchro.ack('indexer', $1, $2)`, tok, r.Transactions[len(r.Transactions)-1].Position)
			}
			if !r.HasMore {
				return
			}
		}
	}

	const rounds = 30
	const direct = 12 // rows inserted (and later deleted) directly per round
	const owners = 3

	// Compaction scheduled concurrently with everything else, except in even rounds
	// (gate held), whose readers then pull incrementally from their last cursor.
	var gate sync.Mutex
	stop := make(chan struct{})
	var passes atomic.Int64
	compactErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				compactErr <- nil
				return
			case <-time.After(30 * time.Millisecond):
			}
			gate.Lock()
			_, err := compactAll(ctx, db, "0 seconds")
			gate.Unlock()
			if err != nil {
				compactErr <- err
				return
			}
			passes.Add(1)
		}
	}()
	stopCompactor := func() {
		select {
		case <-stop:
		default:
			close(stop)
			require.NoError(t, <-compactErr)
		}
	}
	defer stopCompactor()
	gateHeld := false
	defer func() { // a failed round must not leave the compactor waiting on the gate
		if gateHeld {
			gate.Unlock()
		}
	}()

	pushers := []*pusher{
		{id: "phone-1", tag: 1, rows: map[int64]string{}, born: map[int64]int{}},
		{id: "phone-2", tag: 2, rows: map[int64]string{}, born: map[int64]int{}},
	}
	type scopeClient struct {
		scope string
		rep   replica
		cur   string
	}
	var scopes []*scopeClient
	for o := 0; o < owners; o++ {
		scopes = append(scopes, &scopeClient{scope: fmt.Sprintf("owner:o%d", o)})
	}
	scopes = append(scopes, &scopeClient{scope: "owner:p"})

	var samples []map[string]int
	rebuilds, pulls := 0, 0
	churnTag := 100
	var churned []string
	for round := 1; round <= rounds; round++ {
		if round%2 == 0 {
			gate.Lock()
			gateHeld = true
		}
		// Direct writes, several source transactions: insert this round's rows, update
		// last round's, delete those of two rounds ago.
		base := int64(round * 1000)
		for i := 0; i < direct; i += 4 {
			_, err := db.Pool.Exec(ctx, `INSERT INTO tasks (id, owner, title)
				SELECT g, 'o' || (g % $3), 'direct' FROM generate_series($1::int8, $2::int8) g`,
				base+int64(i), base+int64(i+3), owners)
			require.NoError(t, err)
		}
		_, err := db.Pool.Exec(ctx, `UPDATE tasks SET v = v + 1 WHERE id BETWEEN $1 AND $2`, base-1000, base-1000+direct)
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, `DELETE FROM tasks WHERE id BETWEEN $1 AND $2`, base-2000, base-2000+direct)
		require.NoError(t, err)

		// Long-lived pushers: insert two rows, update one, delete what they inserted
		// two rounds ago.
		for _, p := range pushers {
			var muts []map[string]any
			for i := 0; i < 2; i++ {
				k := int64(1_000_000*p.tag + round*10 + i)
				muts = append(muts, p.mutation("insert", k, map[string]any{"owner": "p", "title": "pushed"}))
				p.born[k] = round
			}
			var olds []int64
			for k, r := range p.born {
				if r == round-2 {
					olds = append(olds, k)
				}
			}
			sort.Slice(olds, func(i, j int) bool { return olds[i] < olds[j] })
			for k, r := range p.born {
				if r == round-1 {
					muts = append(muts, p.mutation("update", k, map[string]any{"title": "edited"}))
					break
				}
			}
			for _, k := range olds {
				muts = append(muts, p.mutation("delete", k, nil))
			}
			_, res := mustPush(t, db, p.id, muts)
			for i, r := range res {
				require.Equal(t, "accepted", r.Status, "round %d %s mutation %d: %+v", round, p.id, i, r)
				k := int64(muts[i]["pk"].(int64))
				switch muts[i]["op"] {
				case "delete":
					delete(p.rows, k)
					delete(p.born, k)
				default:
					p.rows[k] = r.Version
				}
			}
		}

		// A short-lived client: the one of the last round has its rows deleted and is
		// retired; its id is refused from then on. This round's pushes one row.
		if len(churned) > 0 {
			// The compactor pauses meanwhile: with retired_client_retention zero its next
			// pass forgets the id.
			if !gateHeld {
				gate.Lock()
			}
			last := churned[len(churned)-1]
			_, err := db.Pool.Exec(ctx, `DELETE FROM tasks WHERE id BETWEEN $1 AND $2`, 9_000_000+(round-1)*10, 9_000_000+(round-1)*10+9)
			if err == nil {
				_, err = callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client($1)::text`, last)
			}
			var refused error
			if err == nil {
				_, refused = pushRaw(ctx, db.Pool, last, []map[string]any{{"id": mutationID(churnTag, 999), "table": "tasks",
					"op": "insert", "pk": 9_999_999, "row": map[string]any{"owner": "p"}}})
			}
			if !gateHeld {
				gate.Unlock()
			}
			require.NoError(t, err)
			requireSQLState(t, refused, "SY409")
		}
		churnTag++
		c := &pusher{id: fmt.Sprintf("tablet-%d", round), tag: churnTag, rows: map[int64]string{}, born: map[int64]int{}}
		_, res := mustPush(t, db, c.id, []map[string]any{c.mutation("insert", int64(9_000_000+round*10), map[string]any{"owner": "p"})})
		require.Equal(t, "accepted", res[0].Status)
		churned = append(churned, c.id)

		// Everything of this round is materialized and acknowledged.
		waitAckedPast(t, db)
		consumeGroup()

		// Scope clients pull (or rebuild, when a compaction passed their cursor) and
		// must hold exactly their scope's live state.
		for i, s := range scopes {
			var rebuilt bool
			s.rep, s.cur, rebuilt = pullOrRebuild(t, db, fmt.Sprintf("reader-%d", i), s.scope, s.rep, s.cur)
			if rebuilt {
				rebuilds++
			} else {
				pulls++
			}
			requireReplica(t, liveScope(t, db, liveScopeSQL, s.scope), s.rep, fmt.Sprintf("round %d scope %s", round, s.scope))
		}

		if gateHeld {
			gate.Unlock()
			gateHeld = false
		}

		// One more compaction, then the sample: nothing in flight any more.
		_, err = compactAll(ctx, db, "0 seconds")
		require.NoError(t, err)
		samples = append(samples, tableCounts(t, db))
	}
	stopCompactor()

	// The table of samples, for the log.
	var names []string
	for n := range samples[0] {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%-22s", n)
		for _, s := range samples {
			fmt.Fprintf(&b, " %4d", s[n])
		}
		b.WriteString("\n")
	}
	t.Logf("row counts per round (%d scheduled compaction passes, %d incremental pulls, %d rebuilds):\n%s",
		passes.Load(), pulls, rebuilds, b.String())

	require.Positive(t, pulls, "incremental pulls")
	require.Positive(t, groupDelivered, "transactions delivered to the consumer group")
	require.Positive(t, rebuilds, "rebuilds after compaction passed a cursor")

	// From round 3 on the live data has its steady size (rows live for two rounds):
	// no table may hold more rows in any later round than it did in round 3.
	for _, n := range names {
		steady := samples[2][n]
		for r := 3; r < rounds; r++ {
			require.LessOrEqual(t, samples[r][n], steady,
				"synchro.%s grows: %d rows after round 3, %d after round %d", n, steady, samples[r][n], r+1)
		}
	}
	// And what only replay, pull or push idempotency needed is gone entirely once
	// acknowledged and past its retention (zero here).
	last := samples[rounds-1]
	for _, n := range []string{"effect", "event", "txn", "write_fence", "mutation_outcome", "retired_client", "quarantine", "push_context", "change"} {
		require.Zero(t, last[n], "synchro.%s after the last compaction", n)
	}
	// Reservations: exactly the live registered rows (deletions' tombstones went with
	// their ledger events).
	require.Equal(t, countOf(t, db, `SELECT (SELECT count(*) FROM tasks) + (SELECT count(*) FROM notes)
		+ (SELECT count(*) FROM project_members)`), last["row_version"])
}

// CALL synchro.compact_all commits after every batch: while it is held inside a later
// batch by a row lock, another session already sees what the earlier batches deleted
// and the horizon they recorded. If the batches shared one transaction, the observer
// would still see every effect (and no horizon) until the procedure returned.
func TestCompactAllCommitsEachBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	setSetting(t, db, "compact_batch_rows", "5")
	_, cur := startScope(t, db, "batches", "owner:a")
	_, err := db.Pool.Exec(ctx, `INSERT INTO tasks (id, owner, title) SELECT g, 'a', 't' FROM generate_series(1, 30) g`)
	require.NoError(t, err)
	waitAckedPast(t, db)
	require.Equal(t, 30, countOf(t, db, `SELECT count(*) FROM synchro.effect`))
	require.Equal(t, 30, countOf(t, db, `SELECT count(*) FROM synchro.event`))

	// A held transaction locks one ledger event: the event phase, after every effect
	// batch, waits for it.
	locker, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, `SELECT 1 FROM synchro.event WHERE event_ordinal = 17 FOR UPDATE`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	type result struct {
		rep map[string]any
		err error
	}
	done := make(chan result, 1)
	go func() {
		var raw string
		err := conn.QueryRow(ctx, `CALL synchro.compact_all('0 seconds')`).Scan(&raw)
		var r result
		r.err = err
		if err == nil {
			r.err = json.Unmarshal([]byte(raw), &r.rep)
		}
		done <- r
	}()
	eventually(t, 30*time.Second, "compact_all to wait for the locked event", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, pid) > 0
	})

	// Still running, and the effect batches are committed.
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.effect`), "the effect batches are committed while compact_all runs")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.retention`), "the horizon is committed")
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND query LIKE 'CALL synchro.compact_all%'`, pid),
		"compact_all is still running")
	_, err = pullRaw(db, "batches", "owner:a", cur, 10)
	requireSQLState(t, err, "SY409")

	require.NoError(t, locker.Rollback(ctx))
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("compact_all did not return after the lock was released")
	}
	require.NoError(t, r.err)
	require.EqualValues(t, 30, r.rep["deleted_effects"], "%v", r.rep)
	require.EqualValues(t, 30, r.rep["deleted_events"], "%v", r.rep)
	require.EqualValues(t, 1, r.rep["deleted_transactions"], "%v", r.rep)
	require.GreaterOrEqual(t, r.rep["batches"].(float64), float64(12), "%v", r.rep)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.event`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn`))

	// One call of synchro.compact is one bounded batch and says whether more is left:
	// the consumer groups' change record first (7 changes), then the effects (7), all
	// within the budget of 5 rows.
	write(t, db, `INSERT INTO tasks (id, owner, title) SELECT g, 'a', 't' FROM generate_series(31, 37) g`)
	var one map[string]any
	require.NoError(t, callJSON(db, &one, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 5, one["deleted_changes"], "%v", one)
	require.EqualValues(t, 0, one["deleted_effects"], "%v", one)
	require.Equal(t, false, one["done"], "%v", one)
	require.NoError(t, callJSON(db, &one, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 2, one["deleted_changes"], "%v", one)
	require.EqualValues(t, 3, one["deleted_effects"], "%v", one)
	require.Equal(t, false, one["done"], "%v", one)
	require.Equal(t, 4, countOf(t, db, `SELECT count(*) FROM synchro.effect`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.change`))
}

// The replay ledgers are trimmed only below the acknowledgement: a transaction the
// slot could still send again keeps its identity. With the acknowledgement held back
// (the state a crash between slot advance and its record leaves), compaction deletes
// effects but keeps the ledger; once the runner adopted the slot's position, the ledger
// goes, and the stream continues with nothing replayed or lost.
func TestCompactKeepsLedgerAboveAcknowledgement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one')`)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'a', 'two')`)
	waitAckedPast(t, db)
	e.stopRunner(t)
	mustExec(t, db, `UPDATE synchro.progress SET acknowledged_end_lsn = NULL`)

	var rep map[string]any
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('0 seconds')::text`))
	require.EqualValues(t, 2, rep["deleted_effects"], "%v", rep)
	require.EqualValues(t, 0, rep["deleted_transactions"], "%v", rep)
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.txn`))
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.event`))

	e.startRunner(t)
	waitAckedPast(t, db)
	_, err := compactAll(ctx, db, "0 seconds")
	require.NoError(t, err)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.txn`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.event`))

	// Restarted on a trimmed ledger: new writes materialize, nothing is poisoned.
	e.stopRunner(t)
	e.startRunner(t)
	_, err = db.Pool.Exec(ctx, `INSERT INTO tasks (id, owner, title) VALUES (3, 'a', 'three')`)
	require.NoError(t, err)
	waitAckedPast(t, db)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`))
	rep2, _ := startScope(t, db, "after", "owner:a")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), rep2, "after a restart on a trimmed ledger")
}

// retire_client: the client's outcomes and write fences go (a pending one too, and the
// stream materializes that push anyway), push refuses the id with SY409 from then on,
// other clients keep theirs byte for byte, and only the operator may call it.
func TestRetireClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db

	insert := func(id string, key int64) []map[string]any {
		return []map[string]any{{"id": id, "table": "tasks", "op": "insert", "pk": key,
			"row": map[string]any{"owner": "a", "title": "t"}}}
	}
	mustPush(t, db, "old-phone", insert(mutationID(1, 1), 1))
	keptRaw, _ := mustPush(t, db, "other", insert(mutationID(2, 1), 2))
	waitAckedPast(t, db)
	// A push the runner has not materialized yet: its fence is pending.
	e.stopRunner(t)
	mustPush(t, db, "old-phone", insert(mutationID(1, 2), 3))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'old-phone' AND coverage IS NULL`))
	otherBefore := countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'other'`) +
		countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'other'`)

	// Only the operator.
	_, err := callAs(ctx, db, "synchro_app", `SELECT synchro.retire_client('old-phone')::text`)
	requireSQLState(t, err, "42501")
	_, err = callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client('')::text`)
	requireSQLState(t, err, "SY400")
	_, err = callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client(NULL)::text`)
	requireSQLState(t, err, "SY400")

	raw, err := callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client('old-phone')::text`)
	require.NoError(t, err)
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &rep))
	require.Equal(t, map[string]any{"already_retired": false, "deleted_outcomes": float64(2), "deleted_write_fences": float64(2)}, rep)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'old-phone'`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'old-phone'`))

	// Refused from then on: a new mutation and the replay of a decided one.
	_, err = pushRaw(ctx, db.Pool, "old-phone", insert(mutationID(1, 3), 4))
	requireSQLState(t, err, "SY409")
	_, err = pushRaw(ctx, db.Pool, "old-phone", insert(mutationID(1, 1), 1))
	requireSQLState(t, err, "SY409")
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM tasks WHERE id = 4`))

	// The other client is untouched: same rows, and its replay answers byte for byte.
	require.Equal(t, otherBefore, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'other'`)+
		countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'other'`))
	replay, _ := mustPush(t, db, "other", insert(mutationID(2, 1), 2))
	require.Equal(t, keptRaw, replay)

	// Again: nothing left, already retired.
	raw, err = callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client('old-phone')::text`)
	require.NoError(t, err)
	require.JSONEq(t, `{"already_retired": true, "deleted_outcomes": 0, "deleted_write_fences": 0}`, raw)

	// The stream materializes the retired client's last push (its fence is gone, the
	// row and its WAL are not), and the old device rebuilds as a new client.
	e.startRunner(t)
	waitAckedPast(t, db)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.quarantine`))
	fresh, _ := startScope(t, db, "new-phone", "owner:a")
	require.Contains(t, keysOf(fresh), "tasks/3")
	mustPush(t, db, "new-phone", insert(mutationID(3, 1), 5))
}

// A push of the client holds its lock until it commits: retire_client waits for it and
// then deletes what it recorded; the next push is refused.
func TestRetireClientWaitsForRunningPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = pushRaw(ctx, tx, "racer", []map[string]any{{"id": mutationID(1, 1), "table": "tasks", "op": "insert", "pk": 1,
		"row": map[string]any{"owner": "a"}}})
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	var raw string
	go func() {
		_, err := conn.Exec(ctx, `SET ROLE synchro_operator`)
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT synchro.retire_client('racer')::text`).Scan(&raw)
		}
		done <- err
	}()
	eventually(t, 30*time.Second, "retire_client to wait for the push", func() bool {
		return countOf(t, db, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND NOT granted`, pid) == 1
	})
	require.NoError(t, tx.Commit(ctx))
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("retire_client did not return after the push committed")
	}
	require.NoError(t, err)
	require.JSONEq(t, `{"already_retired": false, "deleted_outcomes": 1, "deleted_write_fences": 1}`, raw)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'racer'`))
	_, err = pushRaw(ctx, db.Pool, "racer", []map[string]any{{"id": mutationID(1, 2), "table": "tasks", "op": "insert", "pk": 2,
		"row": map[string]any{"owner": "a"}}})
	requireSQLState(t, err, "SY409")
}

// The operator's age limits: outcomes older than outcome_retention go at the next
// compaction (younger ones stay), a retired id older than retired_client_retention is
// forgotten (push accepts it again); bad values are refused when written. Ages are made
// by moving recorded times back, never by waiting.
func TestRetentionAgeLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	for i := 1; i <= 3; i++ {
		mustPush(t, db, "aging", []map[string]any{{"id": mutationID(1, i), "table": "tasks", "op": "insert", "pk": i,
			"row": map[string]any{"owner": "a"}}})
	}
	mustExec(t, db, `UPDATE synchro.mutation_outcome SET decided_at = now() - interval '31 days'
		WHERE mutation_id IN ($1::uuid, $2::uuid)`, mutationID(1, 1), mutationID(1, 2))
	var rep map[string]any
	// The default keeps every outcome while its client exists (CONTRACT.md, push).
	require.Equal(t, "never", textOf(t, db, `SELECT value FROM synchro.setting WHERE name = 'outcome_retention'`))
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 0, rep["deleted_outcomes"], "%v", rep)
	require.Equal(t, 3, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'aging'`))

	setSetting(t, db, "outcome_retention", "30 days")
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 2, rep["deleted_outcomes"], "%v", rep)
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'aging'`))

	setSetting(t, db, "outcome_retention", "1 year")
	mustExec(t, db, `UPDATE synchro.mutation_outcome SET decided_at = now() - interval '31 days'`)
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 0, rep["deleted_outcomes"], "%v", rep)

	// Retired ids are forgotten after their retention (default 365 days).
	_, err := callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client('aging')::text`)
	require.NoError(t, err)
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 0, rep["deleted_retired_clients"], "%v", rep)
	mustExec(t, db, `UPDATE synchro.retired_client SET retired_at = now() - interval '366 days'`)
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 1, rep["deleted_retired_clients"], "%v", rep)
	mustPush(t, db, "aging", []map[string]any{{"id": mutationID(1, 9), "table": "tasks", "op": "insert", "pk": 9,
		"row": map[string]any{"owner": "a"}}})

	// Values that do not read as a non-negative interval (or 'never', for outcomes only)
	// are refused when written.
	for _, bad := range []string{"-1 day", "forever", "", "1 day -25 hours"} {
		_, err := db.Pool.Exec(ctx, `UPDATE synchro.setting SET value = $1 WHERE name = 'outcome_retention'`, bad)
		require.Error(t, err, "outcome_retention %q", bad)
	}
	_, err = db.Pool.Exec(ctx, `UPDATE synchro.setting SET value = 'never' WHERE name = 'retired_client_retention'`)
	require.Error(t, err, "retired_client_retention 'never'")
	setSetting(t, db, "outcome_retention", "never")
	mustExec(t, db, `UPDATE synchro.mutation_outcome SET decided_at = now() - interval '100 years'`)
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 0, rep["deleted_outcomes"], "%v", rep)
	for _, bad := range []string{"0", "-5", "x", "1000001"} {
		_, err := db.Pool.Exec(ctx, `UPDATE synchro.setting SET value = $1 WHERE name = 'compact_batch_rows'`, bad)
		require.Error(t, err, "compact_batch_rows %q", bad)
	}
	// A missing setting keeps everything.
	mustExec(t, db, `DELETE FROM synchro.setting WHERE name = 'outcome_retention'`)
	mustExec(t, db, `UPDATE synchro.mutation_outcome SET decided_at = now() - interval '100 years'`)
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 0, rep["deleted_outcomes"], "%v", rep)
}

// The slot row of readiness reports the retained WAL against max_slot_wal_keep_size.
func TestReadinessReportsRetainedWAL(t *testing.T) {
	t.Parallel()
	e := newSyncEnv(t, "")
	db := e.db
	var detail string
	eventually(t, 30*time.Second, "the slot row to report retained WAL", func() bool {
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			`SELECT detail FROM synchro.readiness() WHERE check_name = 'slot'`).Scan(&detail))
		return strings.Contains(detail, "retained_wal_bytes=") && !strings.Contains(detail, "retained_wal_bytes=unknown")
	})
	var keep string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT CASE WHEN setting::int8 < 0 THEN '-1' ELSE (setting::int8 * 1048576)::text END FROM pg_settings WHERE name = 'max_slot_wal_keep_size'`).Scan(&keep))
	require.Contains(t, detail, "max_slot_wal_keep_bytes="+keep)
	require.Contains(t, detail, "safe_wal_bytes=")
}

// A REPEATABLE READ push whose snapshot predates the retirement cannot see it and
// records its outcome for the retired id; the next compaction deletes it (and its
// fence), and the id stays refused.
func TestRetireClientSweepsRacingRepeatableReadPush(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db

	tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1`) // the snapshot
	require.NoError(t, err)

	_, err = callAs(ctx, db, "synchro_operator", `SELECT synchro.retire_client('late')::text`)
	require.NoError(t, err)
	_, err = pushRaw(ctx, tx, "late", []map[string]any{{"id": mutationID(1, 1), "table": "tasks", "op": "insert", "pk": 1,
		"row": map[string]any{"owner": "a"}}})
	require.NoError(t, err, "the snapshot predates the retirement")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'late'`))
	require.Equal(t, 1, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'late'`))

	var rep map[string]any
	require.NoError(t, callJSON(db, &rep, `SELECT synchro.compact('100 years')::text`))
	require.EqualValues(t, 1, rep["deleted_outcomes"], "%v", rep)
	require.EqualValues(t, 1, rep["deleted_write_fences"], "%v", rep)
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.mutation_outcome WHERE client_id = 'late'`))
	require.Zero(t, countOf(t, db, `SELECT count(*) FROM synchro.write_fence WHERE client_id = 'late'`))
	_, err = pushRaw(ctx, db.Pool, "late", []map[string]any{{"id": mutationID(1, 2), "table": "tasks", "op": "insert", "pk": 2,
		"row": map[string]any{"owner": "a"}}})
	requireSQLState(t, err, "SY409")
}

// Deletion reservations (row_version tombstones) go with the ledger event of their
// deletion; a key inserted again keeps its reservation, also when the insert is in
// flight while compaction runs (the reservation is skipped, never waited for), and
// compare-and-swap on it works afterwards.
func TestCompactTombstones(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newSyncEnv(t, "")
	db := e.db
	rel := `(SELECT relation_id FROM synchro.relation WHERE table_id = 'tasks')`
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (1, 'a', 'one'), (2, 'a', 'two'), (3, 'a', 'three')`)
	write(t, db, `DELETE FROM tasks WHERE id IN (1, 2, 3)`)
	write(t, db, `INSERT INTO tasks (id, owner, title) VALUES (2, 'a', 'again')`)
	waitAckedPast(t, db)
	require.Equal(t, 2, countOf(t, db, `SELECT count(*) FROM synchro.row_version WHERE relation_id = `+rel+` AND deleted`))

	// Key 3 is being inserted again, uncommitted, while compaction runs.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO tasks (id, owner, title) VALUES (3, 'a', 'in flight')`)
	require.NoError(t, err)

	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET lock_timeout = '10s'`) // a wait would fail, not hang
	require.NoError(t, err)
	var raw string
	require.NoError(t, conn.QueryRow(ctx, `SELECT synchro.compact('0 seconds')::text`).Scan(&raw))
	var rep map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw), &rep))
	require.EqualValues(t, 1, rep["deleted_reservations"], "only key 1's tombstone: %v", rep)
	require.NoError(t, tx.Commit(ctx))

	type rv struct {
		pk      string
		deleted bool
	}
	rows, err := db.Pool.Query(ctx, `SELECT pk, deleted FROM synchro.row_version WHERE relation_id = `+rel+` ORDER BY pk`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rv, error) {
		var x rv
		return x, r.Scan(&x.pk, &x.deleted)
	})
	require.NoError(t, err)
	require.Equal(t, []rv{{"2", false}, {"3", false}}, got)

	// Compare-and-swap on the kept reservations, and a key whose tombstone went can be
	// inserted again.
	for _, k := range []int64{2, 3} {
		var ver string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT version FROM synchro.row_version WHERE relation_id = `+rel+` AND pk = $1`,
			fmt.Sprint(k)).Scan(&ver))
		_, res := mustPush(t, db, "cas", []map[string]any{{"id": mutationID(1, int(k)), "table": "tasks", "op": "update", "pk": k,
			"base_version": ver, "row": map[string]any{"title": "cas"}}})
		require.Equal(t, "accepted", res[0].Status, "key %d: %+v", k, res[0])
	}
	_, res := mustPush(t, db, "cas", []map[string]any{{"id": mutationID(1, 9), "table": "tasks", "op": "insert", "pk": 1,
		"row": map[string]any{"owner": "a", "title": "back"}}})
	require.Equal(t, "accepted", res[0].Status, "%+v", res[0])
	waitAckedPast(t, db)
	rep2, _ := startScope(t, db, "tomb", "owner:a")
	requireReplica(t, liveScope(t, db, liveScopeSQL, "owner:a"), rep2, "after tombstones were trimmed")
}

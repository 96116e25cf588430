package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/gen"
	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner/collate"
	"github.com/synchro/synchro/runner/decode"
	"github.com/synchro/synchro/runner/msgauth"
)

// Materialization outcomes of synchro.materialize_batch, one per source transaction.
const (
	OutcomeMaterialized = "materialized"
	OutcomeDuplicate    = "duplicate"
)

// applier is the collate.Sink of one session: it stages consecutive source
// transactions into pg_temp.synchro_stage in COPY batches inside one database
// transaction on an apply connection (a materialization batch), and
// materializes them when the batch closes (see closeBatch). It is also the only
// writer of durable progress in a session (materialize, runner_idle, runner_ack,
// runner_poison all go through it, in order), so they never contend but for the
// progress row's lock, which orders them.
//
// With one apply connection, at most one batch is in flight: its
// materialize_batch call and COMMIT run in a goroutine of their own (inflight)
// while the applier goes on decoding and staging the next batch in memory, so
// the apply backend is not idle while Go prepares the next batch.
//
// With two (pipelined, the default), batches alternate between the connections
// and up to two are in flight: while batch N writes on one, batch N+1 is sent
// (COPY) and prepared on the other (synchro.materialize_prepare: relation
// checks, fence pairing, row images), then written once batch N committed
// (synchro.materialize_write). Only the writes are serial; each batch still
// commits in commit order, and its outcome is handled in that order.
//
// A connection has one user at a time: a batch in flight owns its connection
// until its outcome is handled (finish); the batch being staged owns another
// (tx); runner_idle and runner_poison run on the first connection only when no
// batch is in flight, open or staged, and a pipelined applier records
// acknowledgements on a connection of its own (ackConn), since a gap between
// batches may not come for as long as a backlog lasts. The applier never waits
// for a batch in flight while its own staging transaction is open (it could hold
// a lock that a third session queues for ahead of the batch in flight: a
// deadlock the server cannot see), and a batch waiting for the one before it
// first commits what it prepared (inflight.run).
type applier struct {
	dec      decode.Decoder // the session's decoder (its plugin's)
	cfg      *Config
	log      *slog.Logger
	conn     *pgx.Conn   // conns[0]: runner_idle, runner_ack and runner_poison between batches
	conns    []*pgx.Conn // the apply connections: one, or two when batches are pipelined
	gen      int64
	frontier *Frontier
	wake     func() // tells the reader that the durable boundary moved
	// retrySeq: the retry requests counted for the blocking poison when the session
	// started (runner_state): a failed attempt records it (runner_poison), so a
	// request made while the attempt ran is not cleared.
	retrySeq int64

	budget *byteBudget // the reader's; the applier releases what it takes
	slot   string      // the stream's slot (the active-slot pointer); "" is Config.Slot

	key        *msgauth.Key // authenticates the pack's messages before they are staged
	stager     *Stager
	batch      []StageRow // staged rows not yet sent by COPY
	batchBytes int64      // row data in batch (Config.BatchBytes)
	copyBuf    []byte     // the COPY encoder's buffer, kept across flushes
	// tx is the database transaction of the batch being staged, opened lazily at
	// its first use of a connection (COPY, reload, materialize: ensureTx) on one
	// no batch in flight owns (txConn), so that a batch staged while no
	// connection is free stays in memory.
	tx     pgx.Tx
	txConn int
	hdr    collate.TxnHeader
	inTxn  bool // a source transaction is being staged

	txns       []pendingTxn // complete source transactions of the open batch
	events     int          // their row events
	batchStart time.Time
	// alone: the source transaction being staged is one the set-based path never
	// takes (a registry activation, a TRUNCATE, an unchanged out-of-line value:
	// synchro._mat_batch_alone); aloneLast: the open batch ends
	// with one; aloneFirst: it began with one. A pipelined batch that began with a
	// run closes right after such a transaction, so that the run is prepared whole
	// (synchro.materialize_prepare prepares a batch's leading run). One that began
	// with such a transaction has no run to prepare and closes at the usual bounds:
	// closing it early would make a workload of such transactions (an update that
	// leaves a large value unchanged, say) a batch per transaction.
	alone, aloneLast, aloneFirst bool
	// lastCall is how long the last materialize_batch call took: a batch that
	// keeps receiving transactions closes once it has been open that long (group
	// commit), so under a steady load the batch size follows the load and the
	// latency stays about two calls, far below BatchDelay.
	lastCall time.Duration
	// serialUntil: after a failed batch, every source transaction with a commit
	// LSN up to here is materialized alone through the reference path, so that
	// the failing one is quarantined with its own identity.
	serialUntil pglogrepl.LSN

	lastIdle time.Time
	live     *liveness // nil: not watched
	// ackDue: a poll tick found the acknowledgement to record while a batch was
	// open. Under a steady load a batch is open almost all the time, so the first
	// moment between batches records it (afterBatch), not only a later tick that
	// happens to fall between two batches.
	ackDue bool
	// ackConn (pipelined only) records acknowledgements in a goroutine of their
	// own (startAck), whatever is in flight; ackBusy while one runs, which
	// reports on ackDone.
	ackConn *pgx.Conn
	ackBusy bool
	ackDone chan error

	// reloaded: the registered columns (Stager.SetRegistered) were reloaded in
	// the open source transaction. Once is enough for a relation the stager did
	// not know: the reload waits until the transaction is visible, so it sees
	// every registration the transaction made. An activation message reloads
	// again (messages reach maybeReload only once authenticated): it moves colsFrom.
	reloaded bool
	// colsFrom: the registry generation the registered columns were loaded from,
	// that of the last activation message staged (nil: the stream's, at session
	// start). Columns of older generations are not staged (synchro.runner_columns).
	colsFrom *int64

	// fls are the batches in flight, oldest first, at most one per connection;
	// failed is one whose call failed, until fail takes it over.
	fls    []*inflight
	failed *inflight
}

// inflight is a closed batch whose materialization runs in its own goroutine
// (run) on the apply connection it owns (conn). Only that goroutine touches tx
// until done delivers the result; everything else belongs to the applier.
type inflight struct {
	tx         pgx.Tx
	conn       int
	txns       []pendingTxn
	events     int
	setBased   bool
	pipelined  bool      // materialize_prepare, then materialize_write after prev
	prev       *inflight // the batch before, still in flight when this one started (pipelined)
	batchStart time.Time
	callStart  time.Time
	// writeStart: when the batch's writes could start (its call, or for a
	// pipelined batch the moment the batch before settled); set by run.
	writeStart time.Time
	outcomes   []string // set by run before it sends on done
	prepared   bool     // pipelined: written from what materialize_prepare prepared (set by run)
	err        error    // the call's or the COMMIT's failure, set by finish
	// runErr is run's result, set before settled closes: the batch after reads
	// it once settled is closed.
	runErr  error
	settled chan struct{}
	done    chan error // buffered: run never blocks on it
}

// errPrevFailed: the batch before a pipelined batch failed, so this one wrote
// nothing (it comes again from the slot in the next session).
var errPrevFailed = errors.New("synchro: the batch before failed")

// run materializes and commits the batch on conn and reports the outcome on done.
func (f *inflight) run(ctx context.Context, faults *fault.Injector, conn *pgx.Conn, p gen.MaterializeBatchParams) {
	err := f.materialize(ctx, faults, conn, p)
	f.runErr = err
	close(f.settled)
	f.done <- err
}

func (f *inflight) materialize(ctx context.Context, faults *fault.Injector, conn *pgx.Conn, p gen.MaterializeBatchParams) error {
	var outcomes []string
	var err error
	f.writeStart = f.callStart
	if !f.pipelined {
		outcomes, err = gen.New(f.tx).MaterializeBatch(ctx, p)
	} else {
		outcomes, err = f.prepareWrite(ctx, faults, conn, p)
	}
	if err == nil && len(outcomes) != len(f.txns) {
		err = fmt.Errorf("synchro: materialize_batch returned %d outcomes for %d transactions", len(outcomes), len(f.txns))
	}
	if err != nil {
		return err
	}
	faults.Reach(fault.BeforeCommit)
	f.outcomes = outcomes
	return f.tx.Commit(ctx)
}

// prepareWrite is a pipelined batch's materialization: materialize_prepare,
// then, once the batch before committed, materialize_write. When it has to wait
// for the batch before, it first commits what it prepared (the session's work
// tables keep their rows across commits) and writes in a new transaction: it
// never waits for another session while it holds locks.
func (f *inflight) prepareWrite(ctx context.Context, faults *fault.Injector, conn *pgx.Conn,
	p gen.MaterializeBatchParams) ([]string, error) {
	// Only this goroutine reads prev once it runs; dropped here, so that a batch
	// in flight never keeps the chain of every batch before it alive.
	prev := f.prev
	f.prev = nil
	prepared, err := gen.New(f.tx).MaterializePrepare(ctx, gen.MaterializePrepareParams{
		StreamGeneration: p.StreamGeneration, CommitLsns: p.CommitLsns, EndLsns: p.EndLsns,
		Xids: p.Xids, CommitTimes: p.CommitTimes})
	if err != nil {
		return nil, err
	}
	if prev != nil {
		select {
		case <-prev.settled:
		default:
			if err := f.tx.Commit(ctx); err != nil {
				return nil, err
			}
			f.tx = nil
			faults.Reach(fault.Prepared)
			select {
			case <-prev.settled:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			f.writeStart = time.Now()
		}
		if prev.runErr != nil {
			return nil, errPrevFailed
		}
		if f.tx == nil {
			if f.tx, err = conn.Begin(ctx); err != nil {
				return nil, err
			}
		}
	}
	w := gen.MaterializeWriteParams{StreamGeneration: p.StreamGeneration, CommitLsns: p.CommitLsns,
		EndLsns: p.EndLsns, Xids: p.Xids, CommitTimes: p.CommitTimes}
	if prepared != 0 {
		w.Prepared = &prepared
	}
	r, err := gen.New(f.tx).MaterializeWrite(ctx, w)
	if err != nil {
		return nil, err
	}
	f.prepared = r.Prepared
	return r.Outcomes, nil
}

// pendingTxn is one complete source transaction staged in the open batch.
type pendingTxn struct {
	trailer collate.TxnTrailer
	xid     uint32
}

func newApplier(cfg *Config, log *slog.Logger, conn *pgx.Conn, gen int64, f *Frontier, wake func(),
	serialUntil pglogrepl.LSN, key *msgauth.Key) *applier {
	return &applier{
		cfg: cfg, log: log, conn: conn, conns: []*pgx.Conn{conn}, gen: gen, frontier: f, wake: wake, key: key,
		stager:      NewStager(),
		batch:       make([]StageRow, 0, cfg.BatchRows),
		serialUntil: serialUntil,
	}
}

// pipeline makes the applier pipelined: batches alternate between conn and the
// second apply connection second, and acknowledgements are recorded on ackConn.
// Both have their staging tables open (OpenStage).
func (a *applier) pipeline(second, ackConn *pgx.Conn) {
	a.conns = []*pgx.Conn{a.conn, second}
	a.ackConn = ackConn
	a.ackDone = make(chan error, 1)
}

// loadRegistered loads the registered columns of every relation into the
// stager, on q (the open materialization transaction, or the connection), once
// the source transaction xid is visible (nil: at session start), over the
// registry generations from from on (nil: the stream's generation).
func (a *applier) loadRegistered(ctx context.Context, q gen.DBTX, xid, from *int64) error {
	rows, err := gen.New(q).RunnerColumns(ctx, gen.RunnerColumnsParams{Xid: xid, FromGeneration: from})
	if err != nil {
		return fmt.Errorf("synchro: runner_columns: %w", err)
	}
	reg := make(map[uint32]map[string]struct{}, len(rows))
	for _, r := range rows {
		cols := make(map[string]struct{}, len(r.Columns))
		for _, c := range r.Columns {
			cols[c] = struct{}{}
		}
		reg[uint32(r.Relid)] = cols
	}
	a.stager.SetRegistered(reg)
	return nil
}

// maybeReload reloads the registered columns when event e may need columns the
// stager does not know: a registry activation message (it may register columns
// that the same transaction's later row events carry, and it leaves the
// previous generation behind: row events before it belong to that generation,
// whose columns are loaded), or a row of a relation the stager does not know
// (at most once per source transaction). A relation still unknown after that is
// not registered: its key alone is staged and materialization refuses the event.
func (a *applier) maybeReload(ctx context.Context, e collate.Event) error {
	activation := e.Kind == collate.KindMessage && e.Activation != nil
	unknown := e.Kind == collate.KindRow && e.Row != nil && e.Row.Relation != nil && !a.stager.Registered(e.Row.Relation.OID)
	if (!activation && !unknown) || (a.reloaded && !activation) {
		return nil
	}
	a.reloaded = true
	if err := a.ensureTx(ctx); err != nil {
		return err
	}
	from := a.colsFrom
	if activation {
		g := e.Activation.Generation
		from = &g
	}
	xid := int64(a.hdr.Xid)
	if err := a.loadRegistered(ctx, a.tx, &xid, from); err != nil {
		return err
	}
	a.colsFrom = from
	return nil
}

// loadMessageKey reads the server key's HMAC pads (synchro.runner_message_key).
func loadMessageKey(ctx context.Context, conn *pgx.Conn) (*msgauth.Key, error) {
	k, err := gen.New(conn).RunnerMessageKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("synchro: runner_message_key: %w", err)
	}
	return msgauth.NewKey(k.InnerPad, k.OuterPad)
}

// OpenStage creates pg_temp.synchro_stage for this session (synchro.runner_stage_open)
// and checks that it has every column the runner COPYs (StageColumns). A pack older
// than the runner (not migrated yet) makes a table without the newer ones, and the
// COPY naming them would fail with 42703 while a source transaction is being staged:
// judged as that transaction's failure, it could quarantine a good transaction. The
// session fails here instead, before it reads anything, and is retried (the error is
// not a server error: Transient) until the pack is migrated.
func OpenStage(ctx context.Context, conn *pgx.Conn) error {
	if err := gen.New(conn).RunnerStageOpen(ctx); err != nil {
		return fmt.Errorf("synchro: runner_stage_open: %w", err)
	}
	var missing []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(c.name ORDER BY c.n), '{}')
		  FROM pg_catalog.unnest($1::pg_catalog.text[]) WITH ORDINALITY AS c(name, n)
		 WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
		                    WHERE a.attrelid = 'pg_temp.synchro_stage'::pg_catalog.regclass
		                      AND a.attname = c.name AND NOT a.attisdropped)`, StageColumns).Scan(&missing); err != nil {
		return fmt.Errorf("synchro: runner_stage_open: columns: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("synchro: the pack is older than this runner: its staging table has no column %s (run `synchro migrate up`)",
			strings.Join(missing, ", "))
	}
	return nil
}

// ignoreUnauthenticated labels the messages dropped for a MAC that is not the
// server key's (the collator's reasons label the others).
const ignoreUnauthenticated = "unauthenticated"

// authentic reports whether a message event is one of the pack's own: a parsed
// fence or registry activation whose MAC is the server key's (runner/msgauth).
// The collator passes only messages with a Synchro prefix that parse.
func (a *applier) authentic(e collate.Event) bool {
	switch {
	case e.Fence != nil:
		return a.key.VerifyFence(e.Fence)
	case e.Activation != nil:
		return a.key.VerifyActivation(e.Activation)
	}
	return false
}

// Ignored counts a "synchro." message the collator dropped (collate.IgnoreSink).
func (a *applier) Ignored(reason collate.IgnoreReason) {
	a.cfg.Metrics.ignoredMessages(string(reason), 1)
}

// Begin starts staging one source transaction, starting a batch when none is
// being staged. The batch's database transaction opens later (ensureTx).
func (a *applier) Begin(_ context.Context, h collate.TxnHeader) error {
	if len(a.txns) == 0 && a.tx == nil {
		a.batchStart = time.Now()
		a.stager.NewBatch()
	}
	a.hdr, a.inTxn, a.alone = h, true, false
	a.stager.Reset(int32(len(a.txns)))
	a.reloaded = false
	return nil
}

// Event stages one event, flushing a full batch.
func (a *applier) Event(ctx context.Context, e collate.Event) error {
	if e.Kind == collate.KindMessage && !a.authentic(e) {
		// Not the pack's: dropped as if it had never been emitted (it never
		// stops the stream, and costs no reload).
		a.cfg.Metrics.ignoredMessages(ignoreUnauthenticated, 1)
		return nil
	}
	if err := a.maybeReload(ctx, e); err != nil {
		return err
	}
	var err error
	from := len(a.batch)
	switch e.Kind {
	case collate.KindRow:
		a.batch, err = a.stager.Row(a.batch, e.Ordinal, e.Row)
	case collate.KindTruncate:
		a.batch, err = a.stager.Truncate(a.batch, e.Ordinal, e.Truncate)
	case collate.KindMessage:
		if e.Fence != nil {
			a.batch = a.stager.Fence(a.batch, e.Fence)
		} else {
			a.batch = a.stager.Activation(a.batch, e.Activation)
		}
	}
	if err != nil {
		return err
	}
	for i := from; i < len(a.batch); i++ {
		a.batchBytes += a.batch[i].size()
		a.alone = a.alone || len(a.batch[i].Toast) > 0
	}
	// A dependency change is not one: the set-based path takes it (migration 00029).
	a.alone = a.alone || e.Kind == collate.KindTruncate || e.Activation != nil
	// While no connection is free the rows stay in memory up to BatchBytes (a
	// COPY would have to wait for a call), so the overlap covers a whole batch.
	if a.batchBytes >= a.cfg.BatchBytes || (len(a.batch) >= a.cfg.BatchRows && (a.tx != nil || a.freeConn() >= 0)) {
		return a.flush(ctx)
	}
	return nil
}

// ensureTx opens the staged batch's database transaction if it is not open
// yet, on a connection no batch in flight owns, joining the oldest batch in
// flight until one is free.
func (a *applier) ensureTx(ctx context.Context) error {
	if a.tx != nil {
		return nil
	}
	i := a.freeConn()
	for i < 0 {
		if err := a.joinOldest(); err != nil {
			return err
		}
		i = a.freeConn()
	}
	tx, err := a.conns[i].Begin(ctx)
	if err != nil {
		return err
	}
	a.tx, a.txConn = tx, i
	return nil
}

// freeConn is the index of an apply connection that no batch in flight owns
// and the staged batch does not use, -1 if none.
func (a *applier) freeConn() int {
	for i := range a.conns {
		if a.tx != nil && a.txConn == i {
			continue
		}
		used := false
		for _, f := range a.fls {
			used = used || f.conn == i
		}
		if !used {
			return i
		}
	}
	return -1
}

// joinOldest waits for the oldest batch in flight, if any, and handles its
// outcome (finish). The call runs under the session's context, so it returns
// once that is cancelled: a join never waits for ever, and no call outlives its
// session.
func (a *applier) joinOldest() error {
	if len(a.fls) == 0 {
		return nil
	}
	return a.finish(<-a.fls[0].done)
}

// joinAll joins every batch in flight, oldest first, and stops at the first
// failure.
func (a *applier) joinAll() error {
	for len(a.fls) > 0 {
		if err := a.joinOldest(); err != nil {
			return err
		}
	}
	return nil
}

// inflightDone is the channel the oldest batch in flight reports on; nil
// (never ready) when none is.
func (a *applier) inflightDone() <-chan error {
	if len(a.fls) == 0 {
		return nil
	}
	return a.fls[0].done
}

// finish handles the outcome of the oldest batch in flight, on the applier
// goroutine: on success the end LSN of its last source transaction becomes the
// durable processed boundary; a failure is kept (failed) for fail, which
// attributes it to that batch.
func (a *applier) finish(err error) error {
	f := a.fls[0]
	a.fls[0] = nil
	a.fls = a.fls[1:]
	if err != nil {
		f.err = err
		a.failed = f
		return err
	}
	a.beat()
	a.lastCall = time.Since(f.writeStart)
	n := len(f.txns)
	last := f.txns[n-1].trailer
	a.cfg.faults.Reach(fault.AfterCommit)
	now := time.Now()
	for i, t := range f.txns {
		a.cfg.Metrics.materialized(f.outcomes[i], t.trailer.EndLSN, t.trailer.RowEvents, t.trailer.CommitTime, now)
	}
	a.cfg.Metrics.batch(n)
	if f.prepared {
		a.cfg.Metrics.batchPrepared()
	}
	a.log.Debug("batch materialized", "transactions", n, "row_events", f.events,
		"first_commit_lsn", f.txns[0].trailer.CommitLSN, "last_end_lsn", last.EndLSN,
		"set_based", f.setBased, "pipelined", f.pipelined, "prepared", f.prepared, "stage_time", f.callStart.Sub(f.batchStart),
		"total_time", time.Since(f.batchStart))
	if a.frontier.Materialized(last.EndLSN) {
		a.wake()
	}
	return nil
}

// settle joins every batch in flight after a failure. The first failure is
// kept (failed); a batch after it wrote nothing (it waited for the failed one,
// errPrevFailed, or failed itself) and is rolled back: it comes again from the
// slot in the next session.
func (a *applier) settle(ctx context.Context) {
	for len(a.fls) > 0 {
		if a.failed == nil {
			_ = a.joinOldest()
			continue
		}
		f := a.fls[0]
		<-f.done
		a.fls[0] = nil
		a.fls = a.fls[1:]
		rollbackQuietly(ctx, f.tx)
	}
}

// rollbackQuietly rolls back tx, if any, even once ctx is cancelled.
func rollbackQuietly(ctx context.Context, tx pgx.Tx) {
	if tx == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	_ = tx.Rollback(cctx)
	cancel()
}

func (a *applier) flush(ctx context.Context) error {
	if len(a.batch) == 0 {
		return nil
	}
	if err := a.ensureTx(ctx); err != nil {
		return err
	}
	// Binary COPY encoded by the stager (stagecopy.go), not pgx.CopyFrom: the fault
	// point still fires with half the rows encoded, while the COPY is in progress.
	r := newStageReader(a.batch, a.copyBuf, func() { a.cfg.faults.Reach(fault.Copy) })
	_, err := a.tx.Conn().PgConn().CopyFrom(ctx, r, stageCopySQL)
	a.copyBuf = r.buf[:0]
	if err != nil {
		return err
	}
	a.beat()
	a.cfg.Metrics.batchFlushed(a.batchBytes)
	clear(a.batch) // drop references to row data
	a.batch = a.batch[:0]
	a.batchBytes = 0
	return nil
}

// Commit adds the staged source transaction to the open batch. The batch is
// materialized when it closes (closeBatch), not here.
func (a *applier) Commit(_ context.Context, t collate.TxnTrailer) error {
	a.txns = append(a.txns, pendingTxn{trailer: t, xid: a.hdr.Xid})
	a.events += int(t.RowEvents)
	a.inTxn = false
	a.aloneLast = a.alone
	if len(a.txns) == 1 {
		a.aloneFirst = a.alone
	}
	return nil
}

// serial reports whether the open batch is a transaction being re-run alone
// after a failed batch.
func (a *applier) serial() bool {
	return len(a.txns) > 0 && a.txns[len(a.txns)-1].trailer.CommitLSN <= a.serialUntil
}

// closeBatch reports whether the open batch must be materialized now, between
// source transactions: when nothing more is buffered (idle: at low load a batch
// is one transaction, so latency stays minimal), when it re-runs a failed batch
// one transaction at a time, at the transaction and row-event bounds, or once it
// has been open as long as the last materialization call took (capped by
// BatchDelay): while one batch is materialized the next one gathers, as in a
// group commit. While no apply connection is left for it, only the hard bounds
// close the next one (it could not start before a call returns anyway); a
// call's completion closes it otherwise (run).
func (a *applier) closeBatch(idle bool) bool {
	if a.inTxn || len(a.txns) == 0 {
		return false
	}
	hard := a.serial() || a.cfg.PerTransaction ||
		len(a.txns) >= a.cfg.BatchTxns || a.events >= a.cfg.BatchEvents ||
		(a.aloneLast && !a.aloneFirst && len(a.conns) > 1)
	if a.tx == nil && a.freeConn() < 0 {
		return hard
	}
	return hard || idle || time.Since(a.batchStart) >= min(a.cfg.BatchDelay, a.lastCall)
}

// pipelined reports whether the open batch is materialized in two calls
// (materialize_prepare, materialize_write), overlapping the batch before: a
// set-based batch of a pipelined applier.
func (a *applier) pipelined() bool {
	return len(a.conns) > 1 && !a.serial() && !a.cfg.PerTransaction
}

// materialize closes the staged batch: it sends the rows still in memory (COPY)
// and starts the batch's materialization and COMMIT in a goroutine
// (inflight.run); its outcome is handled by a join or by run's loop. A serial
// re-run or a PerTransaction batch is not pipelined: it starts once nothing is
// in flight and is joined before materialize returns.
func (a *applier) materialize(ctx context.Context) error {
	if err := a.flush(ctx); err != nil {
		return err
	}
	if err := a.ensureTx(ctx); err != nil { // a batch without staged rows
		return err
	}
	n := len(a.txns)
	p := gen.MaterializeBatchParams{
		StreamGeneration: a.gen,
		CommitLsns:       make([]string, n),
		EndLsns:          make([]string, n),
		Xids:             make([]int64, n),
		CommitTimes:      make([]time.Time, n),
		SetBased:         !a.serial() && !a.cfg.PerTransaction,
	}
	for i, t := range a.txns {
		p.CommitLsns[i] = t.trailer.CommitLSN.String()
		p.EndLsns[i] = t.trailer.EndLSN.String()
		p.Xids[i] = int64(t.xid)
		p.CommitTimes[i] = t.trailer.CommitTime
	}
	pipelined := a.pipelined()
	if !pipelined && len(a.fls) > 0 {
		// Not reached: a serial or PerTransaction batch follows a batch that was
		// joined (serial batches come first in a session, and each is joined).
		// Never run it beside one in flight, whose commit order it must follow.
		return errors.New("synchro: a batch that is not pipelined while another is in flight")
	}
	f := &inflight{tx: a.tx, conn: a.txConn, txns: a.txns, events: a.events, setBased: p.SetBased,
		pipelined: pipelined, batchStart: a.batchStart, callStart: time.Now(),
		settled: make(chan struct{}), done: make(chan error, 1)}
	if pipelined && len(a.fls) > 0 {
		f.prev = a.fls[len(a.fls)-1]
	}
	a.tx = nil
	a.txns, a.events = make([]pendingTxn, 0, cap(f.txns)), 0
	a.fls = append(a.fls, f)
	go f.run(ctx, a.cfg.faults, a.conns[f.conn], p)
	if !p.SetBased {
		return a.joinAll()
	}
	return nil
}

// abort rolls back every open database transaction after a failure: the staged
// batch's first (the applier never waits for a batch in flight while it holds
// one), then those of the batches in flight once joined, and a failed one's.
func (a *applier) abort(ctx context.Context) {
	rollbackQuietly(ctx, a.tx)
	a.tx = nil
	if a.failed == nil {
		_ = a.joinAll() // its failure is the session's end either way
	}
	a.settle(ctx)
	rollbackQuietly(ctx, a.failedTx())
	a.failed = nil
	a.inTxn = false
	clear(a.batch)
	a.batch = a.batch[:0]
	a.batchBytes = 0
	clear(a.txns)
	a.txns, a.events = a.txns[:0], 0
}

// failedTx is the transaction of a failed in-flight batch, nil if none.
func (a *applier) failedTx() pgx.Tx {
	if a.failed == nil {
		return nil
	}
	return a.failed.tx
}

// maybeIdle records an offered idle boundary when allowed and not throttled:
// only when no batch is in flight, open or staged (an idle boundary comes after
// every transaction received before it).
func (a *applier) maybeIdle(ctx context.Context) error {
	if len(a.fls) > 0 || a.tx != nil || a.inTxn || len(a.txns) > 0 || time.Since(a.lastIdle) < a.cfg.IdleInterval {
		return nil
	}
	b, ok := a.frontier.TakeIdle(false)
	if !ok {
		return nil
	}
	a.lastIdle = time.Now()
	processed, err := gen.New(a.conn).RunnerIdle(ctx, b.String())
	if err != nil {
		return fmt.Errorf("synchro: runner_idle: %w", err)
	}
	p, err := pglogrepl.ParseLSN(processed)
	if err != nil {
		return err
	}
	a.cfg.Metrics.idle()
	a.cfg.faults.Reach(fault.Idle)
	if a.frontier.Materialized(p) {
		a.wake()
	}
	return nil
}

// maybeRecordAck records the acknowledgement once the slot shows the boundary
// the reader sent. Only between batches: runner_ack must not join a
// materialization transaction nor wait for one in flight. Called on every poll
// tick and, when a tick came while a batch was open or in flight (ackDue), right
// after the next batch commits: at most one slot query per poll interval. A
// pipelined applier records it on its own connection instead, whatever is in
// flight (startAck); the session's final acknowledgement comes here once the
// applier stopped.
func (a *applier) maybeRecordAck(ctx context.Context) error {
	if a.ackConn != nil && a.ackBusy {
		return nil
	}
	if a.ackConn != nil && (a.tx != nil || len(a.fls) > 0) {
		a.startAck(ctx)
		return nil
	}
	if a.tx != nil || len(a.fls) > 0 {
		return nil
	}
	a.ackDue = false
	return a.slotAck(ctx, a.conn)
}

// startAck records the acknowledgement on ackConn in a goroutine of its own;
// run's loop takes its outcome (ackDone). runner_ack waits for the progress
// row's lock while a batch writes, and the applier goes on meanwhile.
func (a *applier) startAck(ctx context.Context) {
	a.ackDue = false
	if !a.frontier.Unrecorded() {
		return
	}
	a.ackBusy = true
	go func() { a.ackDone <- a.slotAck(ctx, a.ackConn) }()
}

// ackFinished is the channel a running startAck reports on; nil (never ready)
// when none runs.
func (a *applier) ackFinished() <-chan error {
	if !a.ackBusy {
		return nil
	}
	return a.ackDone
}

// waitAck waits for a running startAck, whose connection the session closes
// after the applier returns.
func (a *applier) waitAck() {
	if a.ackBusy {
		<-a.ackDone
		a.ackBusy = false
	}
}

// slotAck records, on conn, the acknowledgement the slot shows, if it moved.
// Safe beside the applier: the frontier is, and conn is this call's alone.
func (a *applier) slotAck(ctx context.Context, conn *pgx.Conn) error {
	if !a.frontier.Unrecorded() {
		return nil
	}
	slot := a.slot
	if slot == "" {
		slot = a.cfg.Slot
	}
	s, err := slotPosition(ctx, conn, slot)
	if err != nil {
		return err
	}
	if !s.Exists {
		return errSlotMissing
	}
	lsn, ok := a.frontier.ToRecord(s.ConfirmedFlush)
	if !ok {
		return nil
	}
	return a.recordAck(ctx, conn, lsn)
}

func (a *applier) recordAck(ctx context.Context, conn *pgx.Conn, lsn pglogrepl.LSN) error {
	a.cfg.faults.Reach(fault.AfterSlotAck)
	if err := gen.New(conn).RunnerAck(ctx, lsn.String()); err != nil {
		return fmt.Errorf("synchro: runner_ack: %w", err)
	}
	a.frontier.Recorded(lsn)
	a.cfg.Metrics.acked(lsn)
	a.log.Debug("acknowledgement recorded", "lsn", lsn)
	return nil
}

// failAt is the position a decoding failure stands for when the applier may
// know no transaction of it: the commit LSN of the failing payload's transaction
// when the plugin knows it (decode.Error.CommitLSN: wal2json holds a Begin back
// until the first change decodes), else the payload's WAL start. Quarantined at
// the change's own LSN, a poison was never resolved once its transaction
// materialized after a retry (TestRunnerWal2jsonFirstChangePoisonAtCommit).
func failAt(err error, walStart pglogrepl.LSN) pglogrepl.LSN {
	var derr *decode.Error
	if errors.As(err, &derr) && derr.CommitLSN != 0 {
		return derr.CommitLSN
	}
	return walStart
}

// fail handles a failure while staging or materializing: it rolls back the
// open batch. A batch that held more than the one failing transaction, or that
// went through the set-based path, is re-run one transaction at a time
// (*batchFallbackError): the transactions before the failing one are then
// materialized, and the failing one is quarantined with its own identity and
// the class the reference path gives it. Otherwise a poison is quarantined
// here. It returns the error the session ends with.
//
// A batch in flight is earlier in commit order than the one being staged: fail
// joins it first, and if it failed, the failure is its own (the staged batch is
// discarded: it comes again from the slot in the next session).
func (a *applier) fail(ctx context.Context, err error, walStart pglogrepl.LSN) error {
	// The staged batch's transaction goes first: the applier never waits for a
	// batch in flight while it holds one.
	rollbackQuietly(ctx, a.tx)
	a.tx = nil
	if a.failed == nil {
		_ = a.joinAll() // a failure is kept in a.failed
	}
	a.settle(ctx)
	if f := a.failed; f != nil {
		a.failed = nil
		a.discardStaged()
		a.tx, a.txConn, a.txns, a.events, a.inTxn = f.tx, f.conn, f.txns, f.events, false
		err, walStart = f.err, 0
	}
	// The failing source transaction: the one being staged, else the batch's.
	commitLSN := walStart
	switch {
	case a.inTxn:
		commitLSN = a.hdr.CommitLSN
	case len(a.txns) > 0:
		commitLSN = a.txns[len(a.txns)-1].trailer.CommitLSN
	}
	setBased := !a.serial() && !a.cfg.PerTransaction
	rerun := len(a.txns) > 0 && (a.inTxn || len(a.txns) > 1 || setBased)
	through := commitLSN
	a.abort(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	v := Classify(err)
	if v.Disposition != Transient && rerun && through > a.serialUntil {
		// Nothing of the batch is quarantined yet: its transactions come again,
		// from the slot, and are materialized alone up to the failing one.
		a.cfg.Metrics.batchFallback()
		a.log.Warn("materialization batch failed: re-running it one transaction at a time",
			"through_commit_lsn", through, "sqlstate", v.SQLState)
		return &batchFallbackError{Through: through, Err: err}
	}
	if v.Disposition == Poison {
		// A deploy that migrated the pack past this runner's release while it ran
		// makes the functions it calls fail (42883, 42804, or anything else): the
		// release mismatch's failure, not the source transaction's. Not filed as
		// poison: the session ends and the runner waits for its replacement (pack.go,
		// TestRunnerOlderThanThePack). The check's own failure is transient too.
		if perr := checkPack(ctx, a.conn); perr != nil {
			return fmt.Errorf("%w (a failure with SQLSTATE %s not filed as poison)", perr, v.SQLState)
		}
	}
	switch v.Disposition {
	case Poison:
		a.frontier.Poisoned()
		if perr := a.recordPoison(ctx, commitLSN, v); perr != nil {
			return perr
		}
		a.cfg.Metrics.poisoned(v.Class)
		var relationID any // a number when known, not the pointer
		if v.RelationID != nil {
			relationID = *v.RelationID
		}
		a.log.Error("source transaction quarantined: stream blocked until retry or reset",
			"commit_lsn", commitLSN, "class", v.Class, "relation_id", relationID, "sqlstate", v.SQLState)
		return &PoisonError{CommitLSN: commitLSN, Class: v.Class, RelationID: v.RelationID, Err: err}
	case Fatal:
		return &fatalError{err: err}
	}
	return err
}

// discardStaged drops the batch being staged behind a failed in-flight one (its
// transaction was rolled back already: fail).
func (a *applier) discardStaged() {
	clear(a.batch)
	a.batch = a.batch[:0]
	a.batchBytes = 0
	clear(a.txns)
	a.txns, a.events, a.inTxn = a.txns[:0], 0, false
}

func (a *applier) recordPoison(ctx context.Context, commitLSN pglogrepl.LSN, v Verdict) error {
	err := gen.New(a.conn).RunnerPoison(ctx, gen.RunnerPoisonParams{
		StreamGeneration: a.gen,
		CommitLsn:        commitLSN.String(),
		FailureClass:     v.Class,
		RelationID:       v.RelationID,
		AttemptSeq:       a.retrySeq,
	})
	if err != nil {
		return fmt.Errorf("synchro: runner_poison: %w", err)
	}
	return nil
}

// run consumes the reader's items in order until the channel closes (a clean
// stop between transactions) or a failure.
// errStopped: the applier stopped after the transaction in hand because a stop
// was requested; the session ends cleanly.
var errStopped = errors.New("synchro: stopped after the transaction in hand")

func (a *applier) run(ctx, stop context.Context, items <-chan item) error {
	dec := a.dec
	coll := collate.New(a)
	tick := time.NewTicker(a.cfg.PollInterval)
	defer tick.Stop()
	// Every path below joins the calls in flight before it returns; this is the
	// backstop that keeps one from outliving the session whatever happens. The
	// acknowledgement's goroutine is waited for last (its connection is closed
	// once run returns).
	defer a.waitAck()
	defer a.abortInflight(ctx)
	for {
		if len(a.fls) == 0 {
			// While a call is in flight, the loop coming round (a tick) is no
			// progress: taking an item or the call's completion is, and a call
			// blocked by a lock must still make the applier stuck (/livez;
			// refreshApplier counts a backend that works).
			a.beat()
		}
		select {
		case <-ctx.Done():
			a.abort(ctx)
			return ctx.Err()
		case err := <-a.ackFinished():
			a.ackBusy = false
			if err != nil {
				// A batch that failed meanwhile is judged first (its re-run one
				// transaction at a time must not be lost behind this error).
				rollbackQuietly(ctx, a.tx)
				a.tx = nil
				if jerr := a.joinAll(); jerr != nil {
					return a.fail(ctx, jerr, 0)
				}
				return err
			}
		case err := <-a.inflightDone():
			// The batch in flight committed (or failed): record a due
			// acknowledgement while no batch transaction is open, then start the
			// batch that gathered meanwhile.
			if err := a.finish(err); err != nil {
				return a.fail(ctx, err, 0)
			}
			if a.ackDue {
				if err := a.maybeRecordAck(ctx); err != nil {
					return err
				}
			}
			if a.closeBatch(true) {
				if err := a.startBatch(ctx, 0, false); err != nil {
					return err
				}
			}
		case it, ok := <-items:
			if ok && it.kind == itemData {
				a.beat() // a keepalive's idle boundary is no progress while a call waits
			}
			if ok && a.budget != nil {
				a.budget.release(it.size())
			}
			if !ok {
				if a.inTxn {
					// The reader only stops between transactions; anything else
					// is a broken session.
					a.abort(ctx)
					return errors.New("synchro: replication ended inside a source transaction")
				}
				if a.tx == nil {
					// Never while the staged batch's transaction is open (the
					// applier's doc says why); closeBatch then closes it anyway.
					if err := a.joinAll(); err != nil {
						return a.fail(ctx, err, 0)
					}
				}
				if a.closeBatch(true) {
					if err := a.startBatch(ctx, 0, true); err != nil {
						return err
					}
				}
				if err := a.joinAll(); err != nil {
					return a.fail(ctx, err, 0)
				}
				return nil
			}
			switch it.kind {
			case itemData:
				for _, p := range it.payloads {
					msgs, err := dec.Decode(p.walStart, p.data)
					a.cfg.faults.Reach(fault.Decode)
					if err == nil {
						err = coll.Feed(ctx, p.walStart, msgs)
					}
					if err != nil {
						return a.fail(ctx, err, failAt(err, p.walStart))
					}
				}
			case itemIdle:
				a.frontier.OfferIdle(it.walStart)
			}
			stopping := stop.Err() != nil
			if stopping && a.tx == nil {
				// Finish the transaction in hand, without a batch in flight
				// (joined only while no staging transaction is open: the staged
				// batch then closes and is waited for by startBatch).
				if err := a.joinAll(); err != nil {
					return a.fail(ctx, err, it.walStart)
				}
			}
			if a.closeBatch(len(items) == 0 || stopping) {
				if err := a.startBatch(ctx, it.walStart, stopping); err != nil {
					return err
				}
			}
			if stopping && !a.inTxn && len(a.txns) == 0 && a.tx == nil && len(a.fls) == 0 {
				// Finish the transaction in hand, not everything buffered.
				return errStopped
			}
			if it.kind == itemIdle {
				if err := a.maybeIdle(ctx); err != nil {
					return err
				}
			}
		case <-tick.C:
			if a.closeBatch(len(items) == 0) {
				if err := a.startBatch(ctx, 0, false); err != nil {
					return err
				}
			}
			if err := a.maybeIdle(ctx); err != nil {
				return err
			}
			a.ackDue = true
			if err := a.maybeRecordAck(ctx); err != nil {
				return err
			}
		}
	}
}

// startBatch closes the staged batch and starts its materialization (wait: and
// waits for every batch in flight). When no apply connection is left for it, the
// oldest batch in flight is joined first, and a due acknowledgement is recorded
// between the two, while no batch transaction is open: under a backlog the next
// batch often closes on a hard bound before the call in flight returns, and the
// acknowledgement must not wait for a gap that never comes (a pipelined applier
// records it on its own connection). It returns the error the session ends with.
func (a *applier) startBatch(ctx context.Context, walStart pglogrepl.LSN, wait bool) error {
	if a.tx == nil && a.freeConn() < 0 {
		if err := a.joinOldest(); err != nil {
			return a.fail(ctx, err, walStart)
		}
		if a.ackDue {
			if err := a.maybeRecordAck(ctx); err != nil {
				return err
			}
		}
	}
	if err := a.materialize(ctx); err != nil {
		return a.fail(ctx, err, walStart)
	}
	if wait {
		if err := a.joinAll(); err != nil {
			return a.fail(ctx, err, walStart)
		}
	}
	if a.ackDue {
		return a.maybeRecordAck(ctx) // does nothing while the batch is in flight
	}
	return nil
}

// abortInflight waits for the calls still in flight and rolls back their
// transactions if they failed; nothing to do when run joined them (every path
// does).
func (a *applier) abortInflight(ctx context.Context) {
	if len(a.fls) > 0 || a.failed != nil {
		a.abort(ctx)
	}
}

// beat records the applier's progress for /livez.
func (a *applier) beat() {
	if a.live != nil {
		a.live.beat(LoopApplier)
	}
}

// PoisonError: a source transaction was quarantined; the stream is blocked.
type PoisonError struct {
	CommitLSN  pglogrepl.LSN
	Class      string
	RelationID *int64
	Err        error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("synchro: poison transaction at %s: %s", e.CommitLSN, e.Class)
}

func (e *PoisonError) Unwrap() error { return e.Err }

// batchFallbackError: a materialization batch failed; the session ends and the
// next one re-runs its transactions one at a time through commit LSN Through.
type batchFallbackError struct {
	Through pglogrepl.LSN
	Err     error
}

func (e *batchFallbackError) Error() string {
	return fmt.Sprintf("synchro: materialization batch through %s failed: re-running it one transaction at a time", e.Through)
}

func (e *batchFallbackError) Unwrap() error { return e.Err }

// fatalError stops the runner: configuration or capability, never retried.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

var errSlotMissing = &fatalError{err: errors.New("synchro: the replication slot of the stream is missing")}

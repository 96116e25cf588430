package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/synchro/synchro/internal/fault"
	"github.com/synchro/synchro/runner/decode"
)

// itemKind says what an item carries from the reader to the applier.
type itemKind uint8

const (
	itemData itemKind = iota + 1 // one XLogData payload at walStart
	itemIdle                     // a keepalive's server WAL end (in walStart), received between transactions
)

// payload is one XLogData message's payload at its WAL start.
type payload struct {
	walStart pglogrepl.LSN
	data     []byte // owned copy
}

// item is one unit of the reader → applier pipeline, delivered in stream order:
// itemData carries consecutive payloads of at most one source transaction (see
// reader.collect), itemIdle a keepalive's WAL end.
type item struct {
	kind     itemKind
	walStart pglogrepl.LSN // itemData: the last payload's; itemIdle: the server's WAL end
	payloads []payload
	bytes    int64
}

// size is what the item counts against the byte budget.
func (it item) size() int64 { return it.bytes }

// An itemData closes at its source transaction's commit (or outside a
// transaction) and at these bounds, so one hand-off to the applier carries a whole
// small transaction: one per payload cost a goroutine wake-up each (~5 for a 1-row
// transaction), and the scheduler's switches were the runner's largest CPU cost
// under a backlog (perf), on the cores the apply backend needs.
const (
	itemMaxPayloads = 64
	itemMaxBytes    = 256 << 10
)

// itemBuffer bounds what the reader runs ahead of the applier, in items; the
// byteBudget (Config.BufferBytes) bounds it in bytes.
const itemBuffer = 4096

var errDeadConnection = errors.New("synchro: replication connection delivered nothing within the receive timeout")

// reader owns the replication connection of one session. It forwards payloads
// to the applier in order and answers the server itself, so keepalives are
// answered with the durable boundary while a long materialization runs.
type reader struct {
	cfg      *Config
	conn     *pgconn.PgConn
	frontier *Frontier
	items    chan<- item
	budget   *byteBudget
	received *atomic.Uint64
	live     *liveness // nil: not watched

	// stop asks for a clean stop when done: the reader finishes the source
	// transaction in hand, then closes items.
	stop context.Context

	wakeMu sync.Mutex
	woken  bool
	wakeFn func()
	wakeCh chan struct{}
	inTxn  bool // between a Begin and its Commit, by the plugin's boundary
	// boundary classifies a payload as the plugin's begin or commit.
	boundary func([]byte) decode.Boundary
	idleOut  pglogrepl.LSN
	// pending: payloads received and not handed over yet (collect).
	pending      []payload
	pendingBytes int64
	// lastStatus is when the last standby status update went out, from run or
	// dispatch: a reader held back in dispatch sends its next update one standby
	// interval after it, not one interval after it began to wait (which let the
	// gap between two updates grow to twice the interval).
	lastStatus time.Time
	// lastRecv is when the reader last heard from the server, or resumed
	// reading after the applier held it back: the receive timeout measures only
	// time spent waiting for the server.
	lastRecv time.Time
	// decoding asks the server, on a connection of its own, whether the walsender
	// of this session is busy decoding (nil: never asked). A walsender that replays
	// a transaction it sends nothing of (a bulk write to an unregistered table)
	// answers only every wal_sender_timeout / 2: the receive timeout ended such a
	// session, the next one replayed the same transaction from the start, and
	// capture never passed it (TestRunnerSilentReplayOfUnregisteredBulkWrite, found
	// by review 2026-12-05).
	decoding func(context.Context) bool
}

func newReader(cfg *Config, conn *pgconn.PgConn, f *Frontier, items chan<- item, budget *byteBudget,
	stop context.Context, received *atomic.Uint64) *reader {
	return &reader{cfg: cfg, conn: conn, frontier: f, items: items, budget: budget, stop: stop, received: received,
		wakeCh: make(chan struct{}, 1)}
}

// wake interrupts a blocked receive so that the reader reports a new durable
// boundary (or notices a stop) at once. Safe from any goroutine.
func (r *reader) wake() {
	r.wakeMu.Lock()
	r.woken = true
	// Under the lock: once disarm returns, no interruption of an earlier receive can
	// still move the read deadline (it only sets a deadline, which never blocks).
	if r.wakeFn != nil {
		r.wakeFn()
	}
	r.wakeMu.Unlock()
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

// arm registers the interruption of the next receive; false if a wake is pending.
func (r *reader) arm(cancel func()) bool {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	if r.woken {
		r.woken = false
		return false
	}
	r.wakeFn = cancel
	return true
}

func (r *reader) disarm() {
	r.wakeMu.Lock()
	r.wakeFn = nil
	r.wakeMu.Unlock()
}

func (r *reader) stopping() bool {
	return r.stop.Err() != nil
}

// sendStatus reports the durable boundary as written, flushed and applied: all
// three explicitly, since pglogrepl copies a zero flush from the write position.
func (r *reader) sendStatus(ctx context.Context, reply bool) error {
	b := r.frontier.Durable()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: b,
		WALFlushPosition: b,
		WALApplyPosition: b,
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("synchro: standby status update: %w", err)
	}
	r.lastStatus = time.Now()
	r.frontier.Sent(b)
	r.cfg.faults.Reach(fault.StatusSent)
	return nil
}

// run reads until a clean stop (nil, items closed), ctx ends, or the
// connection fails.
func (r *reader) run(ctx context.Context) error {
	defer close(r.items)
	stopWake := context.AfterFunc(r.stop, r.wake)
	defer stopWake()
	// The session's end interrupts a blocked receive too: receives run under no
	// context of their own (below).
	ctxWake := context.AfterFunc(ctx, r.wake)
	defer ctxWake()
	nc := r.conn.Conn()
	defer func() {
		r.disarm() // no wake moves the deadline after this (wake holds wakeMu)
		_ = nc.SetReadDeadline(time.Time{})
	}()
	interrupt := func() { _ = nc.SetReadDeadline(time.Now()) }

	r.lastRecv = time.Now()
	nextStatus := time.Now() // the first update goes out at once
	for {
		r.beat()
		if r.stopping() && !r.inTxn {
			return nil
		}
		now := time.Now()
		if due := !now.Before(nextStatus); due || r.frontier.Unsent() {
			// A periodic update asks for a reply, so a silent peer is detected.
			if err := r.sendStatus(ctx, due); err != nil {
				return err
			}
			if due {
				nextStatus = now.Add(r.cfg.StandbyInterval)
			}
		}
		if now.Sub(r.lastRecv) > r.cfg.ReceiveTimeout {
			if r.decoding == nil || !r.decoding(ctx) {
				return errDeadConnection
			}
			// Silent but alive: the server says its walsender is decoding.
			r.lastRecv = now
		}
		deadline := nextStatus
		if d := r.lastRecv.Add(r.cfg.ReceiveTimeout); d.Before(deadline) {
			deadline = d
		}
		// The receive waits under a read deadline on the socket, not a context: a
		// context per message (a timer and a watcher registered and torn down for
		// each of a backlog's ~5 messages per 1-row transaction) was 15 % of the
		// runner's CPU (perf), on the cores the apply backend needs. A wake (a new
		// durable boundary, a stop, the session's end) moves the deadline to now;
		// pgconn survives a read timeout, keeping a partly read message.
		if err := nc.SetReadDeadline(deadline); err != nil {
			return fmt.Errorf("synchro: replication receive deadline: %w", err)
		}
		if !r.arm(interrupt) {
			continue
		}
		msg, err := r.conn.ReceiveMessage(context.Background())
		r.disarm()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("synchro: replication receive: %w", err)
		}
		r.lastRecv = time.Now()
		if err := r.handle(ctx, msg); err != nil {
			return err
		}
	}
}

func (r *reader) handle(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		if len(msg.Data) == 0 {
			return errors.New("synchro: empty replication message")
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err != nil {
				return fmt.Errorf("synchro: keepalive: %w", err)
			}
			r.noteReceived(pkm.ServerWALEnd)
			if r.inTxn {
				// A walsender sends keepalives while it streams a long transaction
				// (its WAL end is then the transaction's commit record): answered,
				// never an idle boundary.
				r.cfg.Logger.Debug("keepalive inside a source transaction: answered, not an idle boundary",
					"server_wal_end", pkm.ServerWALEnd, "reply_requested", pkm.ReplyRequested)
			}
			if pkm.ReplyRequested {
				if err := r.sendStatus(ctx, false); err != nil {
					return err
				}
			}
			if !r.inTxn && pkm.ServerWALEnd > r.idleOut {
				if err := r.handOver(ctx); err != nil {
					return err
				}
				r.idleOut = pkm.ServerWALEnd
				return r.dispatch(ctx, item{kind: itemIdle, walStart: pkm.ServerWALEnd})
			}
			return nil
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				return fmt.Errorf("synchro: xlogdata: %w", err)
			}
			r.noteReceived(xld.WALStart)
			data := bytes.Clone(xld.WALData)
			switch r.boundary(data) {
			case decode.BoundaryBegin:
				r.inTxn = true
			case decode.BoundaryCommit:
				r.inTxn = false
			}
			return r.collect(ctx, payload{walStart: xld.WALStart, data: data})
		}
		return nil // an unknown CopyData kind carries nothing for a logical client
	case *pgproto3.ErrorResponse:
		return walsenderError(pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return errors.New("synchro: server ended the replication stream")
	}
	return nil
}

// collect adds a payload to the pending item and hands the item over when it
// closes: at its transaction's end (or outside a transaction), or at the item's
// bounds. A transaction's commit is handed over as soon as it is received, so
// batching payloads delays nothing the applier could act on.
func (r *reader) collect(ctx context.Context, p payload) error {
	r.pending = append(r.pending, p)
	r.pendingBytes += int64(len(p.data))
	if r.inTxn && len(r.pending) < itemMaxPayloads && r.pendingBytes < itemMaxBytes {
		return nil
	}
	return r.handOver(ctx)
}

// handOver dispatches the pending payloads, if any, as one item.
func (r *reader) handOver(ctx context.Context) error {
	n := len(r.pending)
	if n == 0 {
		return nil
	}
	it := item{kind: itemData, walStart: r.pending[n-1].walStart, payloads: r.pending, bytes: r.pendingBytes}
	r.pending, r.pendingBytes = make([]payload, 0, itemMaxPayloads), 0
	return r.dispatch(ctx, it)
}

// dispatch hands an item to the applier once the byte budget admits it and the
// buffer has room. While the applier is behind (buffer full by count or bytes) it
// keeps the server informed: the durable boundary as it moves, and an update at
// least every standby interval, counted from the last one sent (lastStatus). The
// applier releases the item's bytes when it takes it.
func (r *reader) dispatch(ctx context.Context, it item) error {
	admitted := r.budget.tryAcquire(it.size())
	if admitted {
		select {
		case r.items <- it:
			return nil
		default:
		}
	}
	t := time.NewTimer(time.Until(r.lastStatus.Add(r.cfg.StandbyInterval)))
	defer t.Stop()
	for {
		r.beat()             // held back by the applier: waiting here is not the reader's fault
		var send chan<- item // nil (never ready) until the budget admits the item
		if admitted {
			send = r.items
		}
		select {
		case send <- it:
			r.lastRecv = time.Now()
			return nil
		case <-r.budget.freed:
			if !admitted {
				admitted = r.budget.tryAcquire(it.size())
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-r.wakeCh:
			if r.frontier.Unsent() {
				if err := r.sendStatus(ctx, false); err != nil {
					return err
				}
				t.Reset(time.Until(r.lastStatus.Add(r.cfg.StandbyInterval)))
			}
		case <-t.C:
			if err := r.sendStatus(ctx, false); err != nil {
				return err
			}
			t.Reset(time.Until(r.lastStatus.Add(r.cfg.StandbyInterval)))
		}
	}
}

func (r *reader) beat() {
	if r.live != nil {
		r.live.beat(LoopReader)
	}
}

func (r *reader) noteReceived(lsn pglogrepl.LSN) {
	for {
		cur := r.received.Load()
		if uint64(lsn) <= cur || r.received.CompareAndSwap(cur, uint64(lsn)) {
			r.cfg.Metrics.receivedLSN(pglogrepl.LSN(r.received.Load()))
			return
		}
	}
}

// walsenderError classifies an error the walsender sent mid-stream. An object the
// output plugin cannot find in the slot's view of the catalog (undefined_object:
// the publication was dropped; created again, it stays invisible to the slot until
// decoding passes its creation) can never be read past by retrying: it is fatal,
// and only a stream reset recovers. Everything else is retried as before.
func walsenderError(err *pgconn.PgError) error {
	if err.Code == "42704" {
		return &fatalError{err: fmt.Errorf(
			"synchro: fatal: the walsender cannot find an object of the stream (SQLSTATE %s: a dropped publication?): "+
				"the stream must be reset: %w", err.Code, err)}
	}
	return err
}

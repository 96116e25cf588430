package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/synchro/synchro/gen"
)

// SQLSTATEs of the contract the package reacts to.
const (
	codeInvalidArgument = "SY400"
	codeRebuildRequired = "SY409"
	codeLeaseLost       = "SY412"
	codeLockUnavailable = "55P03"
)

// ErrRebuildRequired: SY409, the group's checkpoint is gone (a stream reset, or an
// operator's destructive release let compaction pass it). The group must be
// recreated under a new name and the destination rebuilt.
var ErrRebuildRequired = errors.New("synchro consumer: the group must be recreated (SY409)")

// Config configures Run. DB and Group are required.
type Config struct {
	// DB is a pool whose role may call the consumer-group functions (synchro_consumer).
	DB *pgxpool.Pool
	// Group is an existing group (synchro.create_consumer_group).
	Group string
	// Owner identifies this process in the lease; unique per process. Default:
	// hostname, pid and random bytes.
	Owner string
	// LeaseDuration is the lease each acquire and renewal asks for, in whole seconds
	// (at least 1). Default 30s.
	LeaseDuration time.Duration
	// RenewEvery is how often the lease is renewed while a batch is in flight or the
	// group is idle. Default LeaseDuration/3; more than LeaseDuration/2 is refused.
	RenewEvery time.Duration
	// MaxTransactions and MaxBytes bound each read (read_changes). Defaults 128 and 8 MiB.
	MaxTransactions int
	MaxBytes        int
	// PollInterval is the wait when the group is caught up or another owner holds the
	// lease. Default 500ms.
	PollInterval time.Duration
	// Logger receives lease changes. Default slog.Default().
	Logger *slog.Logger
}

// Change is one change of a transaction: the last state of one row in that source
// transaction. ChangeID is stable across redeliveries: deduplicate on it.
type Change struct {
	ChangeID string          `json:"change_id"`
	Table    string          `json:"table"`
	PK       json.RawMessage `json:"pk"`
	Op       string          `json:"op"` // "upsert" or "delete"
	Version  string          `json:"version"`
	Row      json.RawMessage `json:"row"` // the row image; JSON null for a delete
}

// Transaction is one whole source transaction, in commit order.
type Transaction struct {
	Position   string    `json:"position"`
	CommitTime time.Time `json:"commit_time"`
	Changes    []Change  `json:"changes"`
}

// Batch is one read: consecutive whole transactions after the group's checkpoint.
type Batch struct {
	Transactions []Transaction
}

// Handler applies a batch to the destination. It is acknowledged only when the handler
// returns nil; its context is cancelled when the lease is lost (then nothing is
// acknowledged and the batch is delivered again, to this or another owner).
// At-least-once: a batch may arrive again after a crash; apply idempotently.
type Handler func(ctx context.Context, b Batch) error

// Run consumes the group until ctx ends (then it returns nil after giving the lease
// back), the handler fails (its error, wrapped; the batch stays unacknowledged), a
// database call fails (its error; call Run again to resume from the checkpoint) or
// the group must be recreated (ErrRebuildRequired). While another owner holds the
// lease it waits and tries again; a lost lease (expired and taken over) is acquired
// again and reading resumes from the checkpoint.
func Run(ctx context.Context, cfg Config, h Handler) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	for {
		l, err := acquire(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = consume(ctx, cfg, l, h)
		l.stop()
		if !errors.Is(err, errLeaseLost) {
			l.release(cfg)
			// ctx ended, by cancellation or by its deadline: a clean stop.
			if ctx.Err() != nil && (err == nil || errors.Is(err, ctx.Err())) {
				return nil
			}
			return err
		}
		cfg.Logger.Info("consumer: lease lost; acquiring again", "group", cfg.Group)
	}
}

var errLeaseLost = errors.New("synchro consumer: lease lost")

func (c Config) withDefaults() (Config, error) {
	if c.DB == nil || c.Group == "" {
		return c, errors.New("synchro consumer: DB and Group are required")
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = 30 * time.Second
	}
	if c.LeaseDuration < time.Second {
		c.LeaseDuration = time.Second
	}
	// The server's longest lease: renewals and the give-up time follow the lease
	// actually held, not a longer one asked for.
	c.LeaseDuration = min(c.LeaseDuration, 86400*time.Second)
	if c.RenewEvery <= 0 {
		c.RenewEvery = c.LeaseDuration / 3
	}
	// Renewed after half the lease or later, the lease can lapse between renewals and
	// another owner take over while the handler still runs.
	if c.RenewEvery > c.LeaseDuration/2 {
		return c, fmt.Errorf("synchro consumer: RenewEvery (%s) must be at most half of LeaseDuration (%s)", c.RenewEvery, c.LeaseDuration)
	}
	if c.MaxTransactions <= 0 {
		c.MaxTransactions = 128
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 8 << 20
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func (c Config) leaseSeconds() int32 {
	return int32(min(math.Ceil(c.LeaseDuration.Seconds()), 86400))
}

// lease is one continuous tenure of the group's lease: the token changes with every
// renewal, and the tenure ends when a renewal shows that another owner held the
// lease in between (the token jumped) or the lease could not be renewed in time.
//
// The tenure's end is local, not a database answer: a timer ends it (the handler's
// context cancelled) a margin before the lease held runs out, counted from the moment
// the last successful acquire or renewal was sent (the server's lease runs from a later
// moment, so never before it). A renewal that hangs (a half-open connection) or keeps
// failing cannot keep the handler running past the lease while another owner takes
// it over and acknowledges the same batch (TestConsumerEdgePartitionedHolderOutlivesLease,
// TestConsumerEdgeRefusedRenewalsOutliveLease); each renewal and each read is bounded by
// the same deadline.
type lease struct {
	mu      sync.Mutex // serializes database calls that carry the token
	token   int64
	renewed time.Time // when the last successful acquire or renewal was sent (mu)
	lost    atomic.Bool
	expiry  *time.Timer // ends the tenure at deadline()
	margin  time.Duration
	span    time.Duration   // the lease held
	ctx     context.Context // cancelled when the tenure ends
	cancel  context.CancelFunc
	done    chan struct{}
}

// leaseMargin is how long before the lease runs out the tenure ends: time for the
// handler to see its context end before another owner can take the lease.
func (c Config) leaseMargin() time.Duration {
	return min(c.LeaseDuration/10, 2*time.Second)
}

// end ends the tenure: nothing more is read or acknowledged under it.
func (l *lease) end() {
	l.lost.Store(true)
	l.cancel()
}

// deadline is when the tenure ends unless renewed (mu held).
func (l *lease) deadline() time.Time {
	return l.renewed.Add(l.span - l.margin)
}

// held records a successful acquire or renewal sent at sent (mu held).
func (l *lease) held(sent time.Time) {
	l.renewed = sent
	l.expiry.Reset(time.Until(l.deadline()))
}

// acquire waits for the lease (55P03: another owner holds it) and starts renewing it.
func acquire(ctx context.Context, cfg Config) (*lease, error) {
	q := gen.New(cfg.DB)
	for {
		sent := time.Now()
		tok, err := q.AcquireLease(ctx, gen.AcquireLeaseParams{Name: cfg.Group, Owner: cfg.Owner, LeaseSeconds: cfg.leaseSeconds()})
		if err == nil {
			cfg.Logger.Info("consumer: lease acquired", "group", cfg.Group, "token", tok)
			lctx, cancel := context.WithCancel(ctx)
			l := &lease{token: tok, renewed: sent, ctx: lctx, cancel: cancel, done: make(chan struct{}),
				margin: cfg.leaseMargin(), span: cfg.LeaseDuration}
			l.expiry = time.AfterFunc(time.Until(l.deadline()), l.end)
			go l.renew(cfg)
			return l, nil
		}
		if sqlState(err) != codeLockUnavailable {
			return nil, fmt.Errorf("synchro consumer: acquire_lease: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.PollInterval):
		}
	}
}

// renew renews the lease every RenewEvery until the tenure ends.
func (l *lease) renew(cfg Config) {
	defer close(l.done)
	defer l.expiry.Stop()
	q := gen.New(cfg.DB)
	t := time.NewTicker(cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		sent := time.Now()
		rctx, rcancel := context.WithDeadline(l.ctx, l.deadline())
		tok, err := q.AcquireLease(rctx, gen.AcquireLeaseParams{Name: cfg.Group, Owner: cfg.Owner, LeaseSeconds: cfg.leaseSeconds()})
		rcancel()
		switch {
		case l.lost.Load():
			// The tenure ended while the renewal was under way (its deadline passed):
			// a renewal answered now does not bring it back.
		case err == nil && tok == l.token+1:
			l.token = tok
			l.held(sent)
		case err == nil:
			// Another owner held the lease in between: its acks and reads happened;
			// this tenure's batch is no longer ours to acknowledge.
			l.token = tok
			l.end()
		case sqlState(err) == codeLockUnavailable || sqlState(err) == codeInvalidArgument:
			l.end()
		case !time.Now().Before(l.deadline()):
			// Transient failures until the deadline: the lease is about to expire.
			l.end()
		}
		lost := l.lost.Load()
		l.mu.Unlock()
		if err != nil && !lost && l.ctx.Err() == nil {
			cfg.Logger.Warn("consumer: lease renewal failed; retrying", "group", cfg.Group, "err", err)
		}
		if lost {
			l.cancel()
			return
		}
	}
}

func (l *lease) stop() {
	l.cancel()
	<-l.done
}

// call runs f with the current token unless the tenure ended; SY412 ends it.
func (l *lease) call(f func(token int64) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost.Load() || !time.Now().Before(l.deadline()) {
		l.end()
		return errLeaseLost
	}
	err := f(l.token)
	if sqlState(err) == codeLeaseLost {
		l.end()
		return errLeaseLost
	}
	return err
}

// release gives the lease back (a clean stop), so another owner need not wait for
// the expiry. Best effort: the lease expires anyway.
func (l *lease) release(cfg Config) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), 5*time.Second)
	defer cancel()
	_ = gen.New(cfg.DB).ReleaseLease(ctx, gen.ReleaseLeaseParams{Name: cfg.Group, Token: l.token})
}

// consume reads, handles and acknowledges batches for one tenure.
func consume(ctx context.Context, cfg Config, l *lease, h Handler) error {
	q := gen.New(cfg.DB)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var raw string
		err := l.call(func(tok int64) error {
			var err error
			raw, err = q.ReadChanges(l.ctx, gen.ReadChangesParams{Name: cfg.Group, Token: tok,
				MaxTransactions: int32(cfg.MaxTransactions), MaxBytes: int32(min(cfg.MaxBytes, math.MaxInt32))})
			return err
		})
		if err != nil {
			return readError(ctx, l, err)
		}
		var page struct {
			Transactions []Transaction `json:"transactions"`
			HasMore      bool          `json:"has_more"`
		}
		if err := json.Unmarshal([]byte(raw), &page); err != nil {
			return fmt.Errorf("synchro consumer: read_changes result: %w", err)
		}
		if len(page.Transactions) == 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-l.ctx.Done():
				return errLeaseLost
			case <-time.After(cfg.PollInterval):
			}
			continue
		}
		if err := h(l.ctx, Batch{Transactions: page.Transactions}); err != nil {
			if l.ctx.Err() != nil && ctx.Err() == nil {
				return errLeaseLost // the handler saw its context end with the lease
			}
			return fmt.Errorf("synchro consumer: handler: %w", err)
		}
		last := page.Transactions[len(page.Transactions)-1].Position
		err = l.call(func(tok int64) error {
			// The handler's work is done: acknowledge it even when Run is stopping
			// (a lost lease is refused by call before this runs).
			actx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), 10*time.Second)
			defer cancel()
			return q.AckPosition(actx, gen.AckPositionParams{Name: cfg.Group, Token: tok, Position: last})
		})
		if err != nil {
			return readError(ctx, l, err)
		}
	}
}

// readError maps a failed read or ack to Run's outcome.
func readError(ctx context.Context, l *lease, err error) error {
	switch {
	case errors.Is(err, errLeaseLost):
		return errLeaseLost
	case ctx.Err() != nil:
		return ctx.Err()
	case l.ctx.Err() != nil:
		return errLeaseLost
	case sqlState(err) == codeRebuildRequired:
		return fmt.Errorf("%w: %w", ErrRebuildRequired, err)
	}
	return fmt.Errorf("synchro consumer: %w", err)
}

// sqlState is the SQLSTATE of a server error, "" for anything else.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/synchro/synchro/gen"
)

// ErrAlreadyRunning: another runner holds this database's runner lock.
var ErrAlreadyRunning = errors.New("synchro: another runner is running on this database")

// control is the runner's control session. runner_claim takes a session-level
// advisory lock on it, so it stays open for the runner's life: losing it loses
// the claim. It serves claim, state, heartbeat and release, one at a time.
type control struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func openControl(ctx context.Context, dbURL string) (*control, error) {
	conn, err := connect(ctx, dbURL, "synchro-runner-control")
	if err != nil {
		return nil, err
	}
	return &control{conn: conn}, nil
}

func (c *control) close(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	closeQuietly(ctx, c.conn)
}

// lost reports whether the control session (and with it the claim) is gone.
func (c *control) lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn.IsClosed()
}

func (c *control) claim(ctx context.Context, cfg *Config) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := gen.New(c.conn).RunnerClaim(ctx, gen.RunnerClaimParams{
		Owner:       cfg.Owner,
		Pid:         int32(os.Getpid()),
		SlotName:    cfg.Slot,
		Publication: cfg.Publication,
		// What pgx encodes for a time.Duration: whole microseconds.
		HeartbeatInterval: pgtype.Interval{Microseconds: cfg.HeartbeatInterval.Microseconds(), Valid: true},
		Decoder:           cfg.Decoder,
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" {
		return ErrAlreadyRunning
	}
	if err != nil {
		return fmt.Errorf("synchro: runner_claim: %w", err)
	}
	return nil
}

func (c *control) serverVersion(ctx context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, err := gen.New(c.conn).ServerVersionNum(ctx)
	return int(v), err
}

// publicEmitsMessages reports whether every role may call pg_logical_emit_message.
func (c *control) publicEmitsMessages(ctx context.Context) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return gen.New(c.conn).PublicEmitsMessages(ctx)
}

// checkPack refuses a pack newer than this runner's release (pack.go).
func (c *control) checkPack(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return checkPack(ctx, c.conn)
}

// state reads synchro.runner_state(); ok is false before the first stream.
func (c *control) state(ctx context.Context) (Progress, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return readState(ctx, c.conn)
}

func (c *control) heartbeat(ctx context.Context, received pglogrepl.LSN, state string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var recv *string
	if received != 0 {
		recv = ptr(received.String())
	}
	return gen.New(c.conn).RunnerHeartbeat(ctx, gen.RunnerHeartbeatParams{ReceivedLsn: recv, State: state})
}

func (c *control) release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return gen.New(c.conn).RunnerRelease(ctx)
}

func readState(ctx context.Context, db gen.DBTX) (Progress, bool, error) {
	var p Progress
	row, err := gen.New(db).RunnerState(ctx)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("synchro: runner_state: %w", err)
	}
	// The query maps NULL to '' (LSNs, text), 0 and false.
	if row.GenerationStartLsn == "" || row.ProcessedEndLsn == "" {
		return p, false, errors.New("synchro: runner_state: stream generation without start or processed boundary")
	}
	p.StreamGeneration = row.StreamGeneration
	p.SlotName = row.SlotName
	for _, f := range []struct {
		dst *pglogrepl.LSN
		src string
	}{{&p.GenerationStart, row.GenerationStartLsn}, {&p.MaterializedCommit, row.MaterializedCommitLsn},
		{&p.ProcessedEnd, row.ProcessedEndLsn}, {&p.AcknowledgedEnd, row.AcknowledgedEndLsn},
		{&p.PoisonCommit, row.PoisonCommitLsn}} {
		if f.src == "" {
			continue
		}
		if *f.dst, err = pglogrepl.ParseLSN(f.src); err != nil {
			return p, false, fmt.Errorf("synchro: runner_state: %w", err)
		}
	}
	p.RegistryGeneration = row.RegistryGeneration
	p.PoisonClass = row.PoisonClass
	p.RetryRequested = row.RetryRequested
	p.RetrySeq = row.RetrySeq
	p.Plugin = row.Plugin
	return p, true, nil
}

// slotInfo is the slot as pg_replication_slots shows it.
type slotInfo struct {
	Exists         bool
	ConfirmedFlush pglogrepl.LSN
	Active         bool
	Plugin         string
	WALStatus      string // '' when NULL
}

func slotPosition(ctx context.Context, db gen.DBTX, slot string) (slotInfo, error) {
	var s slotInfo
	row, err := gen.New(db).SlotPosition(ctx, slot)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("synchro: read slot position: %w", err)
	}
	s.Exists, s.Active, s.Plugin, s.WALStatus = true, row.Active, row.Plugin, row.WalStatus
	if row.ConfirmedFlushLsn != "" { // '' is NULL
		if s.ConfirmedFlush, err = pglogrepl.ParseLSN(row.ConfirmedFlushLsn); err != nil {
			return s, err
		}
	}
	return s, nil
}

// heartbeatState names what the runner is doing, for synchro.runner.state.
type heartbeatState string

const (
	stateStarting  heartbeatState = "starting"
	stateBaseline  heartbeatState = "baseline"
	stateStreaming heartbeatState = "streaming"
	statePoisoned  heartbeatState = "poisoned"
	stateRetrying  heartbeatState = "backoff"
	stateStopping  heartbeatState = "stopping"
)

// heartbeatBudget bounds one heartbeat call; a control session that cannot answer
// in that time is treated as lost.
const heartbeatBudget = 5 * time.Second

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
	_, err := c.conn.Exec(ctx, `SELECT synchro.runner_claim($1, $2, $3, $4, $5)`,
		cfg.Owner, int32(os.Getpid()), cfg.Slot, cfg.Publication, cfg.HeartbeatInterval)
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
	var v int
	err := c.conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v)
	return v, err
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
	_, err := c.conn.Exec(ctx, `SELECT synchro.runner_heartbeat($1::pg_lsn, $2)`, recv, state)
	return err
}

func (c *control) release(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.conn.Exec(ctx, `SELECT synchro.runner_release()`)
	return err
}

// querier is what readState and slotPosition need from a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readState(ctx context.Context, q querier) (Progress, bool, error) {
	var (
		p                                           Progress
		start, mat, processed, acked, poison, class *string
		gen, regGen                                 *int64
		slot                                        *string
		retry                                       *bool
	)
	err := q.QueryRow(ctx, `
		SELECT stream_generation, slot_name, generation_start_lsn::text, materialized_commit_lsn::text,
		       processed_end_lsn::text, acknowledged_end_lsn::text, registry_generation,
		       poison_commit_lsn::text, poison_class, retry_requested
		FROM synchro.runner_state()`).
		Scan(&gen, &slot, &start, &mat, &processed, &acked, &regGen, &poison, &class, &retry)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("synchro: runner_state: %w", err)
	}
	if gen == nil || start == nil || processed == nil {
		return p, false, errors.New("synchro: runner_state: stream generation without start or processed boundary")
	}
	p.StreamGeneration = *gen
	if slot != nil {
		p.SlotName = *slot
	}
	for _, f := range []struct {
		dst *pglogrepl.LSN
		src *string
	}{{&p.GenerationStart, start}, {&p.MaterializedCommit, mat}, {&p.ProcessedEnd, processed},
		{&p.AcknowledgedEnd, acked}, {&p.PoisonCommit, poison}} {
		if f.src == nil {
			continue
		}
		if *f.dst, err = pglogrepl.ParseLSN(*f.src); err != nil {
			return p, false, fmt.Errorf("synchro: runner_state: %w", err)
		}
	}
	if regGen != nil {
		p.RegistryGeneration = *regGen
	}
	if class != nil {
		p.PoisonClass = *class
	}
	p.RetryRequested = retry != nil && *retry
	return p, true, nil
}

// slotInfo is the slot as pg_replication_slots shows it.
type slotInfo struct {
	Exists         bool
	ConfirmedFlush pglogrepl.LSN
	Active         bool
	Plugin         string
}

func slotPosition(ctx context.Context, q querier, slot string) (slotInfo, error) {
	var (
		s         slotInfo
		confirmed *string
		plugin    *string
	)
	err := q.QueryRow(ctx, `
		SELECT confirmed_flush_lsn::text, active, plugin
		FROM pg_replication_slots
		WHERE slot_name = $1 AND database = current_database() AND slot_type = 'logical'`, slot).
		Scan(&confirmed, &s.Active, &plugin)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("synchro: read slot position: %w", err)
	}
	s.Exists = true
	if plugin != nil {
		s.Plugin = *plugin
	}
	if confirmed != nil {
		if s.ConfirmedFlush, err = pglogrepl.ParseLSN(*confirmed); err != nil {
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

package runner

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/synchro/synchro/gen"
)

// observeBudget bounds one refresh of the database-side gauges.
const observeBudget = 10 * time.Second

// gauges are the database-side figures of one refresh; NaN when unknown, except
// ready, which is 0 unless readiness was read and every check was ok.
type gauges struct {
	walLag, commitLag, heartbeatAge float64
	poisoned, ready                 float64
	retained, maxKeep, safe         float64
	groups                          []gen.ConsumerGroupLagRow // nil when unknown
}

// observeLoop refreshes the database-side gauges every MetricsInterval on a
// session of its own (opened again after a failure): the figures of
// synchro.readiness() (one call, so the rule that computes them is readiness's
// own) and the slot's retained WAL from pg_replication_slots. Catalog views
// only: nothing is decoded, whatever the scrape rate.
func (r *Runner) observeLoop(ctx context.Context, quit <-chan struct{}) {
	var conn *pgx.Conn
	defer func() { closeQuietly(ctx, conn) }()
	t := time.NewTicker(r.cfg.MetricsInterval)
	defer t.Stop()
	for {
		if conn == nil || conn.IsClosed() {
			closeQuietly(ctx, conn)
			conn = nil
			cctx, cancel := context.WithTimeout(ctx, observeBudget)
			c, err := connect(cctx, r.cfg.DatabaseURL, "synchro-runner-metrics")
			cancel()
			if err == nil {
				conn = c
			}
		}
		g, err := r.observe(ctx, conn)
		r.cfg.Metrics.observed(g, err)
		select {
		case <-quit:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observe reads one set of gauges; conn nil is a failed connection. The figures
// start unknown (NaN); the verdict starts not ready (0): readiness that could not be
// read is unready (ADR 001, fail closed), and an alert on synchro_ready == 0 must
// fire then, which it never does on NaN.
func (r *Runner) observe(ctx context.Context, conn *pgx.Conn) (gauges, error) {
	g := gauges{walLag: math.NaN(), commitLag: math.NaN(), heartbeatAge: math.NaN(), poisoned: math.NaN(),
		ready: 0, retained: math.NaN(), maxKeep: math.NaN(), safe: math.NaN()}
	if conn == nil {
		return g, errNoConnection
	}
	ctx, cancel := context.WithTimeout(ctx, observeBudget)
	defer cancel()
	rows, err := gen.New(conn).Readiness(ctx)
	if err != nil {
		return g, err
	}
	g = readinessGauges(rows, g)
	// The slot the active-slot pointer names (after a stream reset, the activated
	// candidate's), else the configured one.
	slotName := r.cfg.Slot
	if st, ok, err := readState(ctx, conn); err == nil && ok {
		if s, err := r.streamSlot(st); err == nil {
			slotName = s
		}
	}
	slot, err := gen.New(conn).SlotRetention(ctx, slotName)
	if err != nil {
		return g, err
	}
	if slot.RetainedBytes >= 0 {
		g.retained = float64(slot.RetainedBytes)
	}
	g.maxKeep = float64(slot.MaxKeepBytes)
	groups, err := gen.New(conn).ConsumerGroupLag(ctx)
	if err != nil {
		return g, err
	}
	g.groups = groups
	// Negative once the slot's budget is exceeded (wal_status unreserved): that figure
	// is the alert, never NaN (TestObserveEdgeSlotBudget); NaN only without the slot.
	if slot.SlotFound {
		g.safe = float64(slot.SafeBytes)
	}
	return g, nil
}

var errNoConnection = errors.New("synchro: metrics: no connection")

// readinessGauges takes the figures readiness decided its rows on from their
// detail (documented in docs/sql/readiness.md): wal_lag bytes=, commit_lag
// seconds=, heartbeat age_s=; poison and ready from the ok column. A figure
// readiness does not know ("unknown") stays NaN.
func readinessGauges(rows []gen.ReadinessRow, g gauges) gauges {
	if len(rows) == 0 {
		return g
	}
	ready := 1.0
	for _, row := range rows {
		if !row.Ok {
			ready = 0
		}
		switch row.CheckName {
		case "wal_lag":
			g.walLag = detailFigure(row.Detail, "bytes")
		case "commit_lag":
			g.commitLag = detailFigure(row.Detail, "seconds")
		case "heartbeat":
			g.heartbeatAge = detailFigure(row.Detail, "age_s")
		case "poison":
			g.poisoned = 0
			if !row.Ok {
				g.poisoned = 1
			}
		}
	}
	g.ready = ready
	return g
}

// detailFigure reads key=number from a readiness detail; NaN when absent or not
// a number.
func detailFigure(detail, key string) float64 {
	for _, f := range strings.Fields(detail) {
		v, ok := strings.CutPrefix(f, key+"=")
		if !ok {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return math.NaN()
		}
		return x
	}
	return math.NaN()
}

// observed sets the database-side gauges; after a failure every figure not
// read is NaN (unknown), never a stale value.
func (m *Metrics) observed(g gauges, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.refreshErrors.Inc()
	}
	m.walLag.Set(g.walLag)
	m.commitLag.Set(g.commitLag)
	m.heartbeatAge.Set(g.heartbeatAge)
	m.poisonState.Set(g.poisoned)
	m.readyState.Set(g.ready)
	m.retainedWAL.Set(g.retained)
	m.maxKeepWAL.Set(g.maxKeep)
	// Each group's lag: exactly the groups of this refresh (a removed group's series
	// goes), none after a failure (unknown).
	m.groupLagTxns.Reset()
	m.groupLagSeconds.Reset()
	for _, r := range g.groups {
		m.groupLagTxns.WithLabelValues(r.Name).Set(float64(r.LagTransactions))
		m.groupLagSeconds.WithLabelValues(r.Name).Set(r.LagSeconds)
	}
	m.safeWAL.Set(g.safe)
}

package runner

import (
	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the runner's Prometheus metrics. Labels carry only bounded
// values (failure classes, outcomes), never row data. A nil *Metrics is a no-op.
type Metrics struct {
	transactions     *prometheus.CounterVec // outcome: materialized, duplicate
	rowEvents        prometheus.Counter
	poison           *prometheus.CounterVec // class
	ignored          *prometheus.CounterVec // reason
	transient        prometheus.Counter
	acks             prometheus.Counter
	idleAcks         prometheus.Counter
	lastMaterialized prometheus.Gauge
	lastAcked        prometheus.Gauge
	received         prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_runner_transactions_total",
			Help: "Source transactions handed to materialization, by outcome (materialized, duplicate).",
		}, []string{"outcome"}),
		rowEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_row_events_total",
			Help: "Row-change events (rows and truncates) of materialized source transactions.",
		}),
		poison: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_runner_poison_total",
			Help: "Blocking poison transactions recorded, by failure class.",
		}, []string{"class"}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "synchro_runner_ignored_messages_total",
			Help: "Logical messages with a synchro. prefix that are not the pack's own and were dropped, by reason " +
				"(non_transactional, unknown_prefix, malformed, unauthenticated). Anyone may emit them; they never block.",
		}, []string{"reason"}),
		transient: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_transient_errors_total",
			Help: "Transient failures retried after a backoff.",
		}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_acks_total",
			Help: "Slot acknowledgements recorded with runner_ack.",
		}),
		idleAcks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_idle_boundaries_total",
			Help: "Idle processed boundaries recorded with runner_idle.",
		}),
		lastMaterialized: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_last_materialized_end_lsn",
			Help: "End LSN of the last durably materialized source transaction.",
		}),
		lastAcked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_last_acknowledged_lsn",
			Help: "Last acknowledgement recorded for the slot.",
		}),
		received: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_received_lsn",
			Help: "Highest WAL position received from the replication connection.",
		}),
	}
	reg.MustRegister(m.transactions, m.rowEvents, m.poison, m.ignored, m.transient, m.acks, m.idleAcks,
		m.lastMaterialized, m.lastAcked, m.received)
	return m
}

func (m *Metrics) materialized(outcome string, end pglogrepl.LSN, rowEvents uint64) {
	if m == nil {
		return
	}
	m.transactions.WithLabelValues(outcome).Inc()
	m.rowEvents.Add(float64(rowEvents))
	m.lastMaterialized.Set(float64(end))
}

func (m *Metrics) poisoned(class string) {
	if m != nil {
		m.poison.WithLabelValues(class).Inc()
	}
}

// ignoredMessages counts n dropped synchro. messages.
func (m *Metrics) ignoredMessages(reason string, n int) {
	if m != nil && n > 0 {
		m.ignored.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *Metrics) transientError() {
	if m != nil {
		m.transient.Inc()
	}
}

func (m *Metrics) acked(lsn pglogrepl.LSN) {
	if m != nil {
		m.acks.Inc()
		m.lastAcked.Set(float64(lsn))
	}
}

func (m *Metrics) idle() {
	if m != nil {
		m.idleAcks.Inc()
	}
}

func (m *Metrics) receivedLSN(lsn pglogrepl.LSN) {
	if m != nil {
		m.received.Set(float64(lsn))
	}
}

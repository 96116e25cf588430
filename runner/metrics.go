package runner

import (
	"math"
	"time"

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
	batchSize        prometheus.Histogram
	batchFallbacks   prometheus.Counter
	batchesPrepared  prometheus.Counter
	bufferBytes      prometheus.Gauge
	bufferPeak       prometheus.Gauge
	batchPeak        prometheus.Gauge
	reconnects       prometheus.Counter
	latency          prometheus.Histogram
	walLag           prometheus.Gauge
	commitLag        prometheus.Gauge
	heartbeatAge     prometheus.Gauge
	retainedWAL      prometheus.Gauge
	maxKeepWAL       prometheus.Gauge
	safeWAL          prometheus.Gauge
	poisonState      prometheus.Gauge
	readyState       prometheus.Gauge
	refreshErrors    prometheus.Counter
	groupLagTxns     *prometheus.GaugeVec // group
	groupLagSeconds  *prometheus.GaugeVec // group
	peakBuffer       int64                // guarded by the byte budget's lock
	peakBatch        int64                // applier goroutine only
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
		bufferBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_buffer_bytes",
			Help: "Bytes of replication payloads received and not yet taken by materialization (bounded by --buffer-bytes).",
		}),
		bufferPeak: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_buffer_peak_bytes",
			Help: "Highest synchro_runner_buffer_bytes since start (above --buffer-bytes only for one payload that is larger alone).",
		}),
		batchPeak: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_runner_batch_peak_bytes",
			Help: "Largest COPY batch of staged rows since start, in bytes (bounded by --batch-bytes plus the row that crossed it).",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "synchro_runner_batch_transactions",
			Help:    "Source transactions per materialization batch (one database transaction).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		batchFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_batch_fallbacks_total",
			Help: "Failed batches re-run one source transaction at a time.",
		}),
		batchesPrepared: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_batches_prepared_total",
			Help: "Pipelined batches written from the relation checks, fence pairing and row images prepared for them (materialize_prepare).",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_runner_reconnects_total",
			Help: "Replication sessions started after the first (after a failure, a PostgreSQL restart or a network drop).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "synchro_materialization_latency_seconds",
			Help: "Per materialized source transaction: seconds from its commit (the commit time in the WAL) " +
				"to the commit of its materialization.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		walLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_wal_lag_bytes",
			Help: "WAL lag of synchro.readiness() (bytes of WAL after the processed boundary); NaN when unknown.",
		}),
		commitLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_commit_lag_seconds",
			Help: "Commit lag of synchro.readiness() (bound of the age of the oldest unmaterialized commit); NaN when unknown.",
		}),
		heartbeatAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_heartbeat_age_seconds",
			Help: "Age of the runner's last heartbeat in synchro.runner, as synchro.readiness() reads it; NaN when unknown.",
		}),
		retainedWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_slot_retained_wal_bytes",
			Help: "WAL the slot retains: pg_current_wal_lsn() - restart_lsn; NaN without the slot.",
		}),
		maxKeepWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_slot_max_wal_keep_bytes",
			Help: "The server's max_slot_wal_keep_size in bytes; -1 when unlimited.",
		}),
		safeWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_slot_safe_wal_bytes",
			Help: "WAL that may still be written before the slot starts losing WAL it needs (safe_wal_size); -1 when max_slot_wal_keep_size is unlimited, 0 once the slot is lost, NaN without the slot.",
		}),
		poisonState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_poisoned",
			Help: "1 while an unresolved poison transaction blocks the stream (the poison check of synchro.readiness()), else 0.",
		}),
		readyState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "synchro_ready",
			Help: "1 when every check of synchro.readiness() was ok at the last refresh, else 0.",
		}),
		groupLagTxns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "synchro_consumer_group_lag_transactions",
			Help: "Per consumer group (synchro.consumer_groups, removed groups left out): transactions after its checkpoint " +
				"that carry changes of its tables.",
		}, []string{"group"}),
		groupLagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "synchro_consumer_group_lag_seconds",
			Help: "Per consumer group: age of the commit of its oldest unacknowledged transaction; 0 when caught up.",
		}, []string{"group"}),
		refreshErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "synchro_metrics_refresh_errors_total",
			Help: "Failed refreshes of the database-side gauges (they keep their last values, NaN after a failure).",
		}),
	}
	for _, g := range []prometheus.Gauge{m.walLag, m.commitLag, m.heartbeatAge, m.retainedWAL, m.maxKeepWAL, m.safeWAL, m.poisonState, m.readyState} {
		g.Set(math.NaN()) // unknown until the first refresh
	}
	reg.MustRegister(m.reconnects, m.latency, m.walLag, m.commitLag, m.heartbeatAge, m.retainedWAL, m.maxKeepWAL, m.safeWAL,
		m.poisonState, m.readyState, m.refreshErrors, m.groupLagTxns, m.groupLagSeconds)
	reg.MustRegister(m.transactions, m.rowEvents, m.poison, m.ignored, m.transient, m.acks, m.idleAcks,
		m.lastMaterialized, m.lastAcked, m.received, m.bufferBytes, m.bufferPeak, m.batchPeak,
		m.batchSize, m.batchFallbacks, m.batchesPrepared)
	return m
}

// materialized records one source transaction of a committed batch; a
// materialized one (not a duplicate) also its latency since commitTime.
func (m *Metrics) materialized(outcome string, end pglogrepl.LSN, rowEvents uint64, commitTime, now time.Time) {
	if m == nil {
		return
	}
	if outcome == OutcomeMaterialized && !commitTime.IsZero() {
		m.latency.Observe(max(now.Sub(commitTime).Seconds(), 0))
	}
	m.transactions.WithLabelValues(outcome).Inc()
	m.rowEvents.Add(float64(rowEvents))
	m.lastMaterialized.Set(float64(end))
}

func (m *Metrics) batch(transactions int) {
	if m != nil {
		m.batchSize.Observe(float64(transactions))
	}
}

func (m *Metrics) batchPrepared() {
	if m != nil {
		m.batchesPrepared.Inc()
	}
}

func (m *Metrics) batchFallback() {
	if m != nil {
		m.batchFallbacks.Inc()
	}
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

// buffered records the reader buffer's bytes (called under the budget's lock,
// so the peak is exact).
func (m *Metrics) buffered(n int64) {
	if m == nil {
		return
	}
	m.bufferBytes.Set(float64(n))
	if n > m.peakBuffer {
		m.peakBuffer = n
		m.bufferPeak.Set(float64(n))
	}
}

// batchFlushed records the bytes of one COPY batch (applier goroutine only).
func (m *Metrics) batchFlushed(n int64) {
	if m == nil {
		return
	}
	if n > m.peakBatch {
		m.peakBatch = n
		m.batchPeak.Set(float64(n))
	}
}

func (m *Metrics) receivedLSN(lsn pglogrepl.LSN) {
	if m != nil {
		m.received.Set(float64(lsn))
	}
}

func (m *Metrics) reconnected() {
	if m != nil {
		m.reconnects.Inc()
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/synchro/synchro/runner"
)

// Environment fallbacks of `synchro run`'s flags.
const (
	envSlot        = "SYNCHRO_SLOT"
	envPublication = "SYNCHRO_PUBLICATION"
	envDecoder     = "SYNCHRO_DECODER"
	envListen      = "SYNCHRO_LISTEN"
	envHeartbeat   = "SYNCHRO_HEARTBEAT_INTERVAL"
	envBatchTxns   = "SYNCHRO_BATCH_TXNS"
	envBatchEvents = "SYNCHRO_BATCH_EVENTS"
	envBatchDelay  = "SYNCHRO_BATCH_DELAY"
	envLiveness    = "SYNCHRO_LIVENESS_TIMEOUT"
	envMetricsIntv = "SYNCHRO_METRICS_INTERVAL"
	envReceive     = "SYNCHRO_RECEIVE_TIMEOUT"
	envStandby     = "SYNCHRO_STANDBY_INTERVAL"
	envBackoffMax  = "SYNCHRO_BACKOFF_MAX"
	envBufferBytes = "SYNCHRO_BUFFER_BYTES"
	envBatchBytes  = "SYNCHRO_BATCH_BYTES"
	envApplySess   = "SYNCHRO_APPLY_SESSIONS"
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro run [--database-url URL] [--slot synchro] [--publication synchro] [--decoder pgoutput|wal2json] [--listen 127.0.0.1:8080] [flags]")
		fmt.Fprintln(fs.Output(), "Every flag also reads a SYNCHRO_* variable (docs/configuration.md).")
		fmt.Fprintln(fs.Output(), "Runs the WAL worker until SIGTERM or SIGINT (then finishes the transaction in hand, acknowledges it and exits 0).")
		fs.PrintDefaults()
	}
	dbURL := databaseURLFlag(fs)
	slot := fs.String("slot", envOr(envSlot, "synchro"), "logical replication slot (default $"+envSlot+")")
	publication := fs.String("publication", envOr(envPublication, "synchro"), "publication (default $"+envPublication+")")
	decoder := fs.String("decoder", envOr(envDecoder, "pgoutput"), "output plugin: pgoutput or wal2json (default $"+envDecoder+"; docs/decoders.md)")
	listen := fs.String("listen", envOr(envListen, "127.0.0.1:8080"), "address of /livez, /readyz and /metrics (default $"+envListen+")")
	heartbeat, err := envDuration(envHeartbeat, 5*time.Second)
	if err != nil {
		return err
	}
	fs.DurationVar(&heartbeat, "heartbeat-interval", heartbeat, "runner heartbeat interval (default $"+envHeartbeat+")")
	standby, err := envDuration(envStandby, 10*time.Second)
	if err != nil {
		return err
	}
	fs.DurationVar(&standby, "standby-interval", standby,
		"interval of standby status updates that ask the server for a reply (default $"+envStandby+")")
	receive, err := envDuration(envReceive, 0)
	if err != nil {
		return err
	}
	fs.DurationVar(&receive, "receive-timeout", receive,
		"a replication connection silent this long is dead and reconnected; 0: 3 x --standby-interval (default $"+envReceive+")")
	liveness, err := envDuration(envLiveness, 0)
	if err != nil {
		return err
	}
	fs.DurationVar(&liveness, "liveness-timeout", liveness,
		"/livez answers 503 when a loop made no progress this long; 0: 2 x the longest of --receive-timeout, --backoff-max, --heartbeat-interval (default $"+envLiveness+")")
	backoffMax, err := envDuration(envBackoffMax, 10*time.Second)
	if err != nil {
		return err
	}
	fs.DurationVar(&backoffMax, "backoff-max", backoffMax,
		"longest delay between reconnection attempts (exponential from 100ms) (default $"+envBackoffMax+")")
	metricsInterval, err := envDuration(envMetricsIntv, 5*time.Second)
	if err != nil {
		return err
	}
	fs.DurationVar(&metricsInterval, "metrics-interval", metricsInterval,
		"refresh interval of the lag, WAL, heartbeat and poison gauges of /metrics (default $"+envMetricsIntv+")")
	batchTxns, err := envInt(envBatchTxns, 1000)
	if err != nil {
		return err
	}
	batchEvents, err := envInt(envBatchEvents, 5000)
	if err != nil {
		return err
	}
	batchDelay, err := envDuration(envBatchDelay, 100*time.Millisecond)
	if err != nil {
		return err
	}
	fs.IntVar(&batchTxns, "batch-txns", batchTxns, "most source transactions per materialization batch (default $"+envBatchTxns+")")
	fs.IntVar(&batchEvents, "batch-events", batchEvents, "a batch closes at this many row events (default $"+envBatchEvents+")")
	fs.DurationVar(&batchDelay, "batch-delay", batchDelay, "a batch closes after this long while transactions keep arriving (default $"+envBatchDelay+")")
	applySessions, err := envInt(envApplySess, 2)
	if err != nil {
		return err
	}
	fs.IntVar(&applySessions, "apply-sessions", applySessions,
		"apply connections: 2 pipelines batches (the next one is prepared while one writes), 1 does not (default $"+envApplySess+")")
	bufferDef, err := envInt(envBufferBytes, 64<<20)
	if err != nil {
		return err
	}
	batchDef, err := envInt(envBatchBytes, 8<<20)
	if err != nil {
		return err
	}
	bufferBytes := fs.Int64("buffer-bytes", int64(bufferDef),
		"bytes of replication payloads buffered ahead of materialization (a larger payload passes alone) (default $"+envBufferBytes+")")
	batchBytes := fs.Int64("batch-bytes", int64(batchDef),
		"bytes of staged rows per COPY batch (a larger row goes alone) (default $"+envBatchBytes+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("run: unexpected arguments %q", fs.Args())
	}
	if err := requireURL(*dbURL); err != nil {
		return err
	}
	return serveRunner(ctx, e, runner.Config{
		DatabaseURL:       *dbURL,
		Slot:              *slot,
		Publication:       *publication,
		Decoder:           *decoder,
		HeartbeatInterval: heartbeat,
		StandbyInterval:   standby,
		ReceiveTimeout:    receive,
		LivenessTimeout:   liveness,
		BackoffMax:        backoffMax,
		MetricsInterval:   metricsInterval,
		BatchTxns:         batchTxns,
		BatchEvents:       batchEvents,
		BatchDelay:        batchDelay,
		ApplySessions:     applySessions,
		BufferBytes:       *bufferBytes,
		BatchBytes:        *batchBytes,
	}, *listen)
}

// serveRunner runs the runner with its HTTP endpoints until ctx ends or the runner
// fails.
func serveRunner(ctx context.Context, e *env, cfg runner.Config, listen string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = runner.NewMetrics(reg)
	cfg.Logger = e.logger
	r, err := runner.New(cfg)
	if err != nil {
		return err
	}

	readiness, err := runner.NewReadiness(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer readiness.Close()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("run: listen: %w", err)
	}
	srv := &http.Server{Handler: runner.Handler(reg, readiness.Ready, r.Live), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	e.logger.Info("serving probes and metrics", "listen", ln.Addr().String(), "database", redactURL(cfg.DatabaseURL))

	runErr := r.Run(ctx)

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		e.logger.Warn("http shutdown", "err", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		e.logger.Warn("http server", "err", err)
	}
	if runner.IsFatal(runErr) {
		// The runner logged the fatal state, in one line naming it.
		return fmt.Errorf("%w: %w", errReported, runErr)
	}
	return runErr
}

// errReported marks an error already logged: the command exits 1 without
// logging it again.
var errReported = errors.New("reported")

// envInt reads a positive integer environment variable, def when unset.
func envInt(name string, def int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("run: %s: want a positive integer", name)
	}
	return n, nil
}

// envDuration reads a duration environment variable (time.ParseDuration), def
// when unset.
func envDuration(name string, def time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("run: %s: want a duration such as 30s", name)
	}
	return d, nil
}

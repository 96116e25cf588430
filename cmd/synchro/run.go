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
	envListen      = "SYNCHRO_LISTEN"
	envHeartbeat   = "SYNCHRO_HEARTBEAT_INTERVAL"
	envBatchTxns   = "SYNCHRO_BATCH_TXNS"
	envBatchEvents = "SYNCHRO_BATCH_EVENTS"
	envBatchDelay  = "SYNCHRO_BATCH_DELAY"
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
		fmt.Fprintln(fs.Output(), "usage: synchro run [--database-url URL] [--slot synchro] [--publication synchro] [--listen 127.0.0.1:8080] [--buffer-bytes N] [--batch-bytes N]")
		fmt.Fprintln(fs.Output(), "Runs the WAL worker until SIGTERM or SIGINT (then finishes the transaction in hand, acknowledges it and exits 0).")
		fs.PrintDefaults()
	}
	dbURL := databaseURLFlag(fs)
	slot := fs.String("slot", envOr(envSlot, "synchro"), "logical replication slot (default $"+envSlot+")")
	publication := fs.String("publication", envOr(envPublication, "synchro"), "publication (default $"+envPublication+")")
	listen := fs.String("listen", envOr(envListen, "127.0.0.1:8080"), "address of /livez, /readyz and /metrics (default $"+envListen+")")
	heartbeat := 5 * time.Second
	if v := os.Getenv(envHeartbeat); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("run: %s: %w", envHeartbeat, err)
		}
		heartbeat = d
	}
	fs.DurationVar(&heartbeat, "heartbeat-interval", heartbeat, "runner heartbeat interval (default $"+envHeartbeat+")")
	batchTxns, err := envInt(envBatchTxns, 1000)
	if err != nil {
		return err
	}
	batchEvents, err := envInt(envBatchEvents, 20000)
	if err != nil {
		return err
	}
	batchDelay := 100 * time.Millisecond
	if v := os.Getenv(envBatchDelay); v != "" {
		if batchDelay, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("run: %s: %w", envBatchDelay, err)
		}
	}
	fs.IntVar(&batchTxns, "batch-txns", batchTxns, "most source transactions per materialization batch (default $"+envBatchTxns+")")
	fs.IntVar(&batchEvents, "batch-events", batchEvents, "a batch closes at this many row events (default $"+envBatchEvents+")")
	fs.DurationVar(&batchDelay, "batch-delay", batchDelay, "a batch closes after this long while transactions keep arriving (default $"+envBatchDelay+")")
	bufferBytes := fs.Int64("buffer-bytes", 64<<20,
		"bytes of replication payloads buffered ahead of materialization (a larger payload passes alone)")
	batchBytes := fs.Int64("batch-bytes", 8<<20, "bytes of staged rows per COPY batch (a larger row goes alone)")
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
		HeartbeatInterval: heartbeat,
		BatchTxns:         batchTxns,
		BatchEvents:       batchEvents,
		BatchDelay:        batchDelay,
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
	srv := &http.Server{Handler: runner.Handler(reg, readiness.Ready), ReadHeaderTimeout: 5 * time.Second}
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
	return runErr
}

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

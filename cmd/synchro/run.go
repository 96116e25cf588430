package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
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
	envShutdown    = "SYNCHRO_SHUTDOWN_TIMEOUT"
)

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: synchro run [--database-url URL] [--slot synchro] [--publication synchro] [--decoder pgoutput|wal2json] [--listen 127.0.0.1:8080] [flags]")
		fmt.Fprintln(fs.Output(), "Every flag also reads a SYNCHRO_* variable (docs/configuration.md).")
		fmt.Fprintln(fs.Output(), "Runs the WAL worker until SIGTERM or SIGINT (then finishes the transaction in hand, acknowledges it and exits 0).")
		fs.PrintDefaults()
	}
	dbURL := databaseURLFlag(fs)
	slot := fs.String("slot", "synchro", "logical replication slot (default $"+envSlot+")")
	publication := fs.String("publication", "synchro", "publication (default $"+envPublication+")")
	decoder := fs.String("decoder", "pgoutput", "output plugin: pgoutput or wal2json (default $"+envDecoder+"; docs/decoders.md)")
	listen := fs.String("listen", "127.0.0.1:8080", "address of /livez, /readyz and /metrics (default $"+envListen+")")
	heartbeat := fs.Duration("heartbeat-interval", 5*time.Second, "runner heartbeat interval (default $"+envHeartbeat+")")
	standby := fs.Duration("standby-interval", 10*time.Second,
		"interval of standby status updates that ask the server for a reply (default $"+envStandby+")")
	receive := fs.Duration("receive-timeout", 0,
		"a replication connection silent this long is dead and reconnected; 0: 3 x --standby-interval (default $"+envReceive+")")
	liveness := fs.Duration("liveness-timeout", 0,
		"/livez answers 503 when a loop made no progress this long; 0: 2 x the longest of --receive-timeout, --backoff-max, --heartbeat-interval (default $"+envLiveness+")")
	backoffMax := fs.Duration("backoff-max", 10*time.Second,
		"longest delay between reconnection attempts (exponential from 100ms) (default $"+envBackoffMax+")")
	metricsInterval := fs.Duration("metrics-interval", 5*time.Second,
		"refresh interval of the lag, WAL, heartbeat and poison gauges of /metrics (default $"+envMetricsIntv+")")
	batchTxns := fs.Int("batch-txns", 1000, "most source transactions per materialization batch (default $"+envBatchTxns+")")
	batchEvents := fs.Int("batch-events", 5000, "a batch closes at this many row events (default $"+envBatchEvents+")")
	batchDelay := fs.Duration("batch-delay", 100*time.Millisecond, "a batch closes after this long while transactions keep arriving (default $"+envBatchDelay+")")
	applySessions := fs.Int("apply-sessions", 2,
		"apply connections: 2 pipelines batches (the next one is prepared while one writes), 1 does not (default $"+envApplySess+")")
	bufferBytes := fs.Int64("buffer-bytes", 64<<20,
		"bytes of replication payloads buffered ahead of materialization (a larger payload passes alone) (default $"+envBufferBytes+")")
	batchBytes := fs.Int64("batch-bytes", 8<<20,
		"bytes of staged rows per COPY batch (a larger row goes alone) (default $"+envBatchBytes+")")
	shutdown := fs.Duration("shutdown-timeout", 60*time.Second,
		"after SIGTERM or SIGINT, how long the transaction in hand may take to finish; past it, it is abandoned (the next start replays it) and the exit status is 1 (default $"+envShutdown+")")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("run: unexpected arguments %s", shownArgs(fs.Args()))
	}
	// A SYNCHRO_* variable stands in for its flag when the flag is not given: flags
	// win, and a variable is read (and checked) only then. Read before the flags were
	// parsed, a bad variable made even -h and a correcting flag fail.
	source, err := flagsFromEnv(fs, [][2]string{
		{"slot", envSlot}, {"publication", envPublication}, {"decoder", envDecoder}, {"listen", envListen},
		{"heartbeat-interval", envHeartbeat}, {"standby-interval", envStandby}, {"receive-timeout", envReceive},
		{"liveness-timeout", envLiveness}, {"backoff-max", envBackoffMax}, {"metrics-interval", envMetricsIntv},
		{"batch-txns", envBatchTxns}, {"batch-events", envBatchEvents}, {"batch-delay", envBatchDelay},
		{"apply-sessions", envApplySess}, {"buffer-bytes", envBufferBytes}, {"batch-bytes", envBatchBytes},
		{"shutdown-timeout", envShutdown},
	})
	if err != nil {
		return err
	}
	// Fail closed on values the runner would otherwise replace by its defaults.
	for _, c := range []struct {
		name string
		bad  bool
		want string
	}{
		{"heartbeat-interval", *heartbeat <= 0, "a positive duration"},
		{"standby-interval", *standby <= 0, "a positive duration"},
		{"receive-timeout", *receive < 0, "a duration, 0 for the default"},
		{"liveness-timeout", *liveness < 0, "a duration, 0 for the default"},
		{"backoff-max", *backoffMax <= 0, "a positive duration"},
		{"metrics-interval", *metricsInterval <= 0, "a positive duration"},
		{"batch-txns", *batchTxns <= 0, "a positive integer"},
		{"batch-events", *batchEvents <= 0, "a positive integer"},
		{"batch-delay", *batchDelay <= 0, "a positive duration"},
		{"apply-sessions", *applySessions != 1 && *applySessions != 2, "1 or 2"},
		{"buffer-bytes", *bufferBytes <= 0, "a positive integer"},
		{"batch-bytes", *batchBytes <= 0, "a positive integer"},
		{"shutdown-timeout", *shutdown <= 0, "a positive duration"},
		// An empty value (a template's unset "$SLOT") fell back to the default:
		// another slot or publication than meant, or the probes on every interface
		// at a random port (net.Listen("tcp", "")).
		{"slot", *slot == "", "^[a-z0-9_]{1,63}$"},
		{"publication", *publication == "", "a publication name"},
		{"decoder", *decoder == "", "pgoutput or wal2json"},
		{"listen", !hostPort(*listen), "host:port (127.0.0.1:8080; :8080 for every interface)"},
	} {
		if c.bad {
			return fmt.Errorf("run: %s: want %s", source[c.name], c.want)
		}
	}
	if err := requireURL(*dbURL); err != nil {
		return err
	}
	return serveRunner(ctx, e, runner.Config{
		DatabaseURL:       *dbURL,
		Slot:              *slot,
		Publication:       *publication,
		Decoder:           *decoder,
		HeartbeatInterval: *heartbeat,
		StandbyInterval:   *standby,
		ReceiveTimeout:    *receive,
		LivenessTimeout:   *liveness,
		BackoffMax:        *backoffMax,
		MetricsInterval:   *metricsInterval,
		BatchTxns:         *batchTxns,
		BatchEvents:       *batchEvents,
		BatchDelay:        *batchDelay,
		ApplySessions:     *applySessions,
		BufferBytes:       *bufferBytes,
		BatchBytes:        *batchBytes,
		ShutdownTimeout:   *shutdown,
	}, *listen)
}

// serveRunner runs the runner with its HTTP endpoints until ctx ends or the runner
// fails.
func serveRunner(ctx context.Context, e *env, cfg runner.Config, listen string) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("run: listen: %w", err)
	}
	return serveRunnerOn(ctx, e, cfg, ln)
}

// serveRunnerOn is serveRunner on a listener already bound (synchro dev prints its
// address, which --listen 127.0.0.1:0 leaves to the system). It closes ln.
func serveRunnerOn(ctx context.Context, e *env, cfg runner.Config, ln net.Listener) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Metrics = runner.NewMetrics(reg)
	cfg.Logger = e.logger
	r, err := runner.New(cfg)
	if err != nil {
		_ = ln.Close()
		return err
	}

	readiness, err := runner.NewReadiness(cfg.DatabaseURL)
	if err != nil {
		_ = ln.Close()
		return err
	}
	defer readiness.Close()
	srv := &http.Server{Handler: runner.Handler(reg, readiness.Ready, r.Live), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	e.logger.Info("serving probes and metrics", "listen", ln.Addr().String(), "database", describeDB(cfg.DatabaseURL))

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

// hostPort reports whether addr is host:port with a port (the host may be empty:
// every interface, asked for as ":8080"). An empty address listened on every
// interface at a random port.
func hostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port != ""
}

// errReported marks an error already logged: the command exits 1 without
// logging it again.
var errReported = errors.New("reported")

// flagsFromEnv sets each flag that was not given on the command line from its
// variable, when that is set, and returns where each flag's value came from: "--name"
// or the variable's name, for error messages.
func flagsFromEnv(fs *flag.FlagSet, pairs [][2]string) (map[string]string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	source := map[string]string{}
	for _, p := range pairs {
		source[p[0]] = "--" + p[0]
		if given[p[0]] {
			continue
		}
		// Set but empty counts as set (a template's unset "$SLOT"): an empty slot,
		// publication, decoder or address is refused below, naming the variable, and
		// an empty number or duration does not parse. It fell back to the default.
		if v, ok := os.LookupEnv(p[1]); ok {
			if err := fs.Set(p[0], v); err != nil {
				return nil, fmt.Errorf("run: %s: invalid value (want the type of --%s)", p[1], p[0])
			}
			source[p[0]] = p[1]
		}
	}
	return source, nil
}

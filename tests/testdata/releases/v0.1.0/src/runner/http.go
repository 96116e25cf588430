package runner

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ReadyFunc reports whether Synchro is ready (synchro.ready()) and the names of
// the failing readiness checks. (*Readiness).Ready is one.
type ReadyFunc func(ctx context.Context) (ready bool, failing []string, err error)

// LiveFunc reports whether the runner's loops make progress and, when not,
// which loops are stuck. (*Runner).Live is one.
type LiveFunc func() (live bool, stuck []string)

// liveBody is /livez's JSON: loop names only.
type liveBody struct {
	Live  bool     `json:"live"`
	Stuck []string `json:"stuck"`
}

// readyTimeout bounds one readiness query of /readyz.
const readyTimeout = 5 * time.Second

// readyBody is /readyz's JSON: check names only, never details or values.
type readyBody struct {
	Ready   bool     `json:"ready"`
	Failing []string `json:"failing"`
	Error   string   `json:"error,omitempty"`
}

// Handler serves the runner's probes and metrics:
//
//	/livez    200 while every running loop of the runner made progress within
//	          the liveness bound; 503 otherwise, with the stuck loops
//	          ({"live":false,"stuck":["applier"]}). A nil live answers 200
//	          while the process serves.
//	/readyz   200 only when synchro.ready() is true; 503 otherwise, with the
//	          failing check names ({"ready":false,"failing":["worker",...]})
//	/metrics  Prometheus text from gatherer
//
// A nil ready answers 503.
func Handler(gatherer prometheus.Gatherer, ready ReadyFunc, live LiveFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		body := liveBody{Live: true, Stuck: []string{}}
		if live != nil {
			if ok, stuck := live(); !ok {
				body.Live = false
				if stuck != nil {
					body.Stuck = stuck
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if body.Live {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		body := readyBody{Failing: []string{}}
		if ready == nil {
			body.Error = "readiness unavailable"
		} else {
			ctx, cancel := context.WithTimeout(req.Context(), readyTimeout)
			ok, failing, err := ready(ctx)
			cancel()
			switch {
			case err != nil:
				// Fail closed; the error text stays out of the body.
				body.Error = "readiness query failed"
			case ok:
				body.Ready = true
			default:
				if failing != nil {
					body.Failing = failing
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if body.Ready {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}

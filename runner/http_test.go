package runner

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestRunnerHTTPHandler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.materialized(OutcomeMaterialized, 0x1000, 3, time.Now().Add(-time.Second), time.Now())
	m.poisoned("truncate")
	m.acked(0x1000)
	srv := httptest.NewServer(Handler(reg, nil, nil))
	defer srv.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/livez")
	require.Equal(t, http.StatusOK, code)
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.JSONEq(t, `{"ready":false,"failing":[],"error":"readiness unavailable"}`, body)
	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`synchro_runner_transactions_total{outcome="materialized"} 1`,
		`synchro_runner_row_events_total 3`,
		`synchro_runner_poison_total{class="truncate"} 1`,
		`synchro_runner_acks_total 1`,
		`synchro_runner_last_acknowledged_lsn 4096`,
		`synchro_runner_last_materialized_end_lsn 4096`,
	} {
		require.True(t, strings.Contains(body, want), "missing %q", want)
	}
	var nilMetrics *Metrics
	nilMetrics.materialized(OutcomeDuplicate, 1, 1, time.Time{}, time.Now()) // a nil *Metrics is a no-op
}

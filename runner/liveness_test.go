package runner

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/gen"
)

func TestLivenessStuckLoops(t *testing.T) {
	t.Parallel()
	lv := liveness{bound: time.Minute}
	now := time.Now()
	require.Empty(t, lv.stuck(now), "loops that never ran are not judged")
	lv.beat(LoopApplier)
	lv.beat(LoopHeartbeat)
	require.Empty(t, lv.stuck(now))
	require.Equal(t, []Loop{LoopApplier, LoopHeartbeat}, lv.stuck(now.Add(2*time.Minute)))
	require.True(t, lv.stale(LoopApplier, now.Add(31*time.Second)))
	require.False(t, lv.stale(LoopApplier, now.Add(29*time.Second)))
	lv.idle(LoopApplier)
	require.Equal(t, []Loop{LoopHeartbeat}, lv.stuck(now.Add(2*time.Minute)), "an idle loop is not judged")
}

func TestLivezHandler(t *testing.T) {
	t.Parallel()
	stuck := []string{"applier"}
	live := func() (bool, []string) { return stuck == nil, stuck }
	srv := httptest.NewServer(Handler(prometheus.NewRegistry(), nil, live))
	defer srv.Close()
	get := func() (int, liveBody) {
		resp, err := http.Get(srv.URL + "/livez")
		require.NoError(t, err)
		defer resp.Body.Close()
		var b liveBody
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
		return resp.StatusCode, b
	}
	code, body := get()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, liveBody{Live: false, Stuck: []string{"applier"}}, body)
	stuck = nil
	code, body = get()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, liveBody{Live: true, Stuck: []string{}}, body)
}

// The fatal slot states: what readiness's slot check also fails on (a real lost
// slot: tests/lostslot).
func TestSlotUsable(t *testing.T) {
	t.Parallel()
	var fatal *fatalError
	require.NoError(t, slotUsable(slotInfo{Exists: true, Plugin: "pgoutput", WALStatus: "reserved"}, "s", "pgoutput"))
	require.NoError(t, slotUsable(slotInfo{Exists: true, Plugin: "pgoutput", WALStatus: "unreserved"}, "s", "pgoutput"))
	err := slotUsable(slotInfo{Exists: true, Plugin: "pgoutput", WALStatus: "lost"}, "s", "pgoutput")
	require.True(t, errors.As(err, &fatal))
	require.ErrorContains(t, err, "wal_status=lost")
	err = slotUsable(slotInfo{Exists: true, Plugin: "test_decoding", WALStatus: "reserved"}, "s", "pgoutput")
	require.True(t, errors.As(err, &fatal))
	require.ErrorContains(t, err, `output plugin "test_decoding"`)
	require.ErrorIs(t, slotUsable(slotInfo{}, "s", "pgoutput"), errSlotMissing)
}

func TestReadinessGauges(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	g := readinessGauges([]gen.ReadinessRow{
		{CheckName: "heartbeat", Ok: true, Detail: "age_s=0.074 limit_s=30.000 interval_s=0.250"},
		{CheckName: "poison", Ok: false, Detail: "unresolved=1 first_commit_lsn=0/1 class=truncate retry_requested=false"},
		{CheckName: "wal_lag", Ok: true, Detail: "bytes=268472 limit_bytes=1073741824"},
		{CheckName: "commit_lag", Ok: false, Detail: "seconds=unknown limit_s=60.000 basis=unknown"},
	}, gauges{walLag: nan, commitLag: nan, heartbeatAge: nan, poisoned: nan, ready: nan})
	require.InDelta(t, 0.074, g.heartbeatAge, 1e-9)
	require.Equal(t, 268472.0, g.walLag)
	require.True(t, math.IsNaN(g.commitLag))
	require.Equal(t, 1.0, g.poisoned)
	require.Equal(t, 0.0, g.ready)
	require.True(t, math.IsNaN(detailFigure("limit_bytes=5", "bytes")), "a key is matched whole")
}

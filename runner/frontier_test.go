package runner

import (
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

func TestRunnerFrontierAcknowledgesOnlyDurableWork(t *testing.T) {
	t.Parallel()
	f := NewFrontier(100, 100)
	require.Equal(t, pglogrepl.LSN(100), f.Durable())
	require.False(t, f.Unsent())
	require.False(t, f.Unrecorded())

	// Received but not materialized: nothing moves.
	f.Sent(150)
	d, s, r := f.Snapshot()
	require.Equal(t, [3]pglogrepl.LSN{100, 100, 100}, [3]pglogrepl.LSN{d, s, r})

	// Materialized → durable; report → sent; slot shows it → record.
	require.True(t, f.Materialized(200))
	require.False(t, f.Materialized(180), "never backwards")
	require.True(t, f.Unsent())
	f.Sent(f.Durable())
	require.False(t, f.Unsent())
	require.True(t, f.Unrecorded())
	_, ok := f.ToRecord(100)
	require.False(t, ok, "slot not there yet")
	lsn, ok := f.ToRecord(200)
	require.True(t, ok)
	require.Equal(t, pglogrepl.LSN(200), lsn)
	f.Recorded(lsn)
	require.False(t, f.Unrecorded())

	// A slot beyond what was sent is not adopted by the running session.
	_, ok = f.ToRecord(300)
	require.False(t, ok)
	f.Recorded(300)
	_, _, r = f.Snapshot()
	require.Equal(t, pglogrepl.LSN(200), r)
}

func TestRunnerFrontierPartialConfirmation(t *testing.T) {
	t.Parallel()
	f := NewFrontier(100, 100)
	f.Materialized(200)
	f.Sent(200)
	f.Materialized(300)
	f.Sent(300)
	lsn, ok := f.ToRecord(200)
	require.True(t, ok)
	require.Equal(t, pglogrepl.LSN(200), lsn)
	f.Recorded(200)
	require.True(t, f.Unrecorded())
}

func TestRunnerFrontierStartsFromProcessedAfterDeath(t *testing.T) {
	t.Parallel()
	// Died after materialize committed, before the status update: processed is
	// ahead of the acknowledgement, and may be reported at once.
	f := NewFrontier(500, 400)
	d, s, r := f.Snapshot()
	require.Equal(t, [3]pglogrepl.LSN{500, 400, 400}, [3]pglogrepl.LSN{d, s, r})
	require.True(t, f.Unsent())
}

func TestRunnerFrontierIdleBoundary(t *testing.T) {
	t.Parallel()
	f := NewFrontier(100, 100)
	_, ok := f.TakeIdle(false)
	require.False(t, ok, "nothing offered")

	f.OfferIdle(90)
	_, ok = f.TakeIdle(false)
	require.False(t, ok, "not after the durable boundary")

	f.OfferIdle(150)
	_, ok = f.TakeIdle(true)
	require.False(t, ok, "a source transaction is open")
	b, ok := f.TakeIdle(false)
	require.True(t, ok)
	require.Equal(t, pglogrepl.LSN(150), b)
	_, ok = f.TakeIdle(false)
	require.False(t, ok, "taken once")

	// A materialized transaction past the offered boundary supersedes it.
	f.OfferIdle(170)
	f.Materialized(200)
	_, ok = f.TakeIdle(false)
	require.False(t, ok)

	// An active poison blocks idle boundaries.
	f.OfferIdle(250)
	f.Poisoned()
	_, ok = f.TakeIdle(false)
	require.False(t, ok)
	f.OfferIdle(260)
	_, ok = f.TakeIdle(false)
	require.False(t, ok)
}

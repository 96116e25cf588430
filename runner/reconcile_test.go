package runner

import (
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

func TestRunnerReconcile(t *testing.T) {
	t.Parallel()
	p := Progress{GenerationStart: 100, ProcessedEnd: 500, AcknowledgedEnd: 300}
	cases := []struct {
		name   string
		slot   pglogrepl.LSN
		p      Progress
		action SlotAction
		target pglogrepl.LSN
		refuse bool
	}{
		{"before generation start", 99, p, 0, 0, true},
		{"after processed", 501, p, 0, 0, true},
		{"at generation start, behind ack", 100, p, SlotAdvance, 300, false},
		{"behind ack", 200, p, SlotAdvance, 300, false},
		{"in sync", 300, p, SlotInSync, 300, false},
		{"after ack", 400, p, SlotAdopt, 400, false},
		{"at processed", 500, p, SlotAdopt, 500, false},
		{"null ack is generation start", 100, Progress{GenerationStart: 100, ProcessedEnd: 100}, SlotInSync, 100, false},
		{"null ack, slot ahead", 150, Progress{GenerationStart: 100, ProcessedEnd: 200}, SlotAdopt, 150, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, target, err := Reconcile(c.slot, c.p)
			if c.refuse {
				require.ErrorIs(t, err, ErrSlotMismatch)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.action, a)
			require.Equal(t, c.target, target)
		})
	}
}

package tests

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/synchro/synchro/tests/testdb"
)

// A pgoutput Begin message carries a 32-bit xid; the pack widens it to the 64-bit id
// nearest to a current snapshot's xmax (synchro._xid_nearest, used by the
// visibility wait and, through synchro._full_xid, by the reset's barrier checks).
// The cases cross epoch boundaries both ways: an xid from the epoch before or after
// near's, and the edges of the ±2^31 window.
func TestXidNearestCrossesEpochs(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	const epoch = int64(1) << 32
	cases := []struct{ xid, near, want int64 }{
		{100, 5*epoch + 200, 5*epoch + 100},                   // same epoch, just before
		{300, 5*epoch + 200, 5*epoch + 300},                   // same epoch, just after (not yet out of the proc array)
		{epoch - 5, 5*epoch + 10, 4*epoch + epoch - 5},        // the previous epoch's last ids
		{5, 5*epoch + epoch - 10, 6*epoch + 5},                // the next epoch's first ids
		{3, 3, 3},                                             // epoch 0
		{(1 << 31) + 7, 5*epoch + 7, 4*epoch + (1 << 31) + 7}, // exactly 2^31 above near's low bits: the window's low edge
		{(1 << 31) + 6, 5*epoch + 7, 5*epoch + (1 << 31) + 6}, // one less: the window's high edge
	}
	for _, c := range cases {
		var got int64
		var full string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT synchro._xid_nearest($1, $2),
		    synchro._full_xid($1, $2::numeric)::text`, c.xid, c.near).Scan(&got, &full))
		// The window is [near - 2^31, near + 2^31), and the answer has xid's low bits.
		require.Equal(t, c.xid, got&(epoch-1), "low bits of %d near %d", c.xid, c.near)
		require.True(t, got >= c.near-(1<<31) && got < c.near+(1<<31), "window: %d near %d gave %d", c.xid, c.near, got)
		require.Equal(t, c.want, got, "%d near %d", c.xid, c.near)
		require.Equal(t, strconv.FormatInt(got, 10), full, "_full_xid agrees with _xid_nearest")
	}
}

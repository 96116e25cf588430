package runner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunnerByteBudget(t *testing.T) {
	t.Parallel()
	b := newByteBudget(10, nil)
	require.True(t, b.tryAcquire(4))
	require.True(t, b.tryAcquire(6))
	require.False(t, b.tryAcquire(1), "full")
	b.release(4)
	<-b.freed
	require.False(t, b.tryAcquire(5), "6 + 5 > 10")
	require.True(t, b.tryAcquire(4))
	b.release(6)
	b.release(4)
	require.True(t, b.tryAcquire(100), "a payload over the bound passes alone")
	require.False(t, b.tryAcquire(1), "and nothing beside it")
	b.release(100)
	require.True(t, b.tryAcquire(1))
}

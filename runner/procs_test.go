package runner

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestApplyProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOMAXPROCS" {
				return v
			}
			return ""
		}
	}

	// Unset, empty or not a positive number (the Go runtime ignores those too): the
	// runner's default.
	for _, v := range []string{"", "0", "-2", "two"} {
		runtime.GOMAXPROCS(3)
		procs, fromEnv := ApplyProcs(env(v))
		require.Equal(t, DefaultProcs, procs, v)
		require.False(t, fromEnv, v)
		require.Equal(t, DefaultProcs, runtime.GOMAXPROCS(0), v)
	}

	for v, want := range map[string]bool{"": false, "0": false, "-2": false, "two": false, "3": true} {
		n, ok := EnvProcs(env(v))
		require.Equal(t, want, ok, v)
		if ok {
			require.Equal(t, 3, n)
		}
	}

	// Set: left as the runtime applied it at start (here: what the test set).
	runtime.GOMAXPROCS(3)
	procs, fromEnv := ApplyProcs(env("3"))
	require.Equal(t, 3, procs)
	require.True(t, fromEnv)
	require.Equal(t, 3, runtime.GOMAXPROCS(0))
}

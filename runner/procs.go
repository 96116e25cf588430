package runner

import (
	"runtime"
	"strconv"
)

// DefaultProcs is the runner process's GOMAXPROCS unless the GOMAXPROCS
// environment variable sets one.
//
// Why one: the runner's Go work is light (decode, MAC check, COPY encoding: about
// 10 µs per row event) and it spends its time waiting on two connections, the
// walsender's and the apply backend's. With more Ps, every wake-up from a network
// wait starts a spinning thread looking for work (runtime findRunnable, futex,
// epoll). Measured on the 2-core benchmark machine with `synchro run` as a child
// process, GOMAXPROCS 2 used up to three times the CPU of 1 for the same backlog, CPU
// the walsender and the apply backend beside it on the same cores then lacked: the
// 1,000-row materialization ratio went from 0.249 to 0.375 (medians of 3), lag p99
// from 34 ms to 13-23 ms (docs/benchmarks.md, "2026-12-03, eighth session"). One P
// still handles about 60,000 row events a second, several times what one apply
// backend materializes.
const DefaultProcs = 1

// ApplyProcs sets GOMAXPROCS to DefaultProcs unless getenv("GOMAXPROCS") names a
// positive number (the Go runtime has applied that one already). It returns the
// GOMAXPROCS in effect and whether the environment chose it. Call it once, from a
// main that runs the runner.
func ApplyProcs(getenv func(string) string) (procs int, fromEnv bool) {
	if _, ok := EnvProcs(getenv); ok {
		return runtime.GOMAXPROCS(0), true
	}
	runtime.GOMAXPROCS(DefaultProcs)
	return DefaultProcs, false
}

// EnvProcs returns the GOMAXPROCS the environment sets, if it sets one the Go
// runtime applies (a positive number).
func EnvProcs(getenv func(string) string) (int, bool) {
	n, err := strconv.Atoi(getenv("GOMAXPROCS"))
	return n, err == nil && n > 0
}

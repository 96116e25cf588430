package main

import "context"

// suite is one benchmark. Each lives in its own file and adds itself to suites from an
// init function, so new suites (materialize, pull, ...) need no change elsewhere.
type suite struct {
	summary string
	// run sets up its own database on the shared durable cluster (bench.newDatabase) or
	// on the fast cluster (bench.newFastDatabase, for the runner suites), runs its
	// measurements and returns its results as a markdown section (printed, and written
	// to --out).
	run func(ctx context.Context, b *bench) (string, error)
}

var suites = map[string]suite{}

func registerSuite(name string, s suite) {
	if _, dup := suites[name]; dup {
		panic("synchro-bench: duplicate suite " + name)
	}
	suites[name] = s
}

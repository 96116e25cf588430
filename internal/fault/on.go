//go:build synchrofaults

package fault

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
)

// Enabled reports whether this build honours SYNCHRO_FAULT.
const Enabled = true

// Injector kills the process at the armed point. A nil Injector does nothing.
type Injector struct {
	spec    Spec
	reached atomic.Int64
}

// FromEnv arms an Injector from SYNCHRO_FAULT; nil when the variable is unset.
func FromEnv() (*Injector, error) {
	v := os.Getenv(Env)
	if v == "" {
		return nil, nil
	}
	s, err := Parse(v)
	if err != nil {
		return nil, err
	}
	return &Injector{spec: s}, nil
}

// Reach counts a reach of p and, at the armed count, writes one line to stderr and
// kills the process with SIGKILL.
func (i *Injector) Reach(p Point) {
	if i == nil || p != i.spec.Point {
		return
	}
	if i.reached.Add(1) != i.spec.N {
		return
	}
	fmt.Fprintf(os.Stderr, "synchro-fault: point=%s reach=%d: SIGKILL\n", p, i.spec.N)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way; nothing else runs here
}

//go:build !synchrofaults

package fault

// Enabled reports whether this build honours SYNCHRO_FAULT.
const Enabled = false

// Injector is empty in production builds.
type Injector struct{}

// FromEnv returns nil: production builds read no fault switch.
func FromEnv() (*Injector, error) { return nil, nil }

// Reach does nothing.
func (*Injector) Reach(Point) {}

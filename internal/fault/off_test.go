//go:build !synchrofaults

package fault

import "testing"

// Production builds ignore SYNCHRO_FAULT.
func TestProductionBuildIgnoresTheSwitch(t *testing.T) {
	t.Setenv(Env, string(Copy)+":1")
	i, err := FromEnv()
	if err != nil || i != nil {
		t.Fatalf("FromEnv() = %v, %v: want nil, nil", i, err)
	}
	if Enabled {
		t.Fatal("Enabled in a build without the synchrofaults tag")
	}
}

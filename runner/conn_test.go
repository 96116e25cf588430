package runner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The apply session's defaults (temp_buffers, work_mem) are set unless the URL
// sets its own, and never override the pinned settings.
func TestConnConfigDefaults(t *testing.T) {
	cfg, err := connConfig("postgres://u@localhost/db", "synchro-runner-apply", applyParams[:]...)
	require.NoError(t, err)
	require.Equal(t, "128MB", cfg.RuntimeParams["temp_buffers"])
	require.Equal(t, "32MB", cfg.RuntimeParams["work_mem"])
	require.Equal(t, "synchro-runner-apply", cfg.RuntimeParams["application_name"])
	require.Equal(t, "UTC", cfg.RuntimeParams["TimeZone"])

	cfg, err = connConfig("postgres://u@localhost/db?temp_buffers=1GB&TimeZone=Europe/Paris", "synchro-runner-apply", applyParams[:]...)
	require.NoError(t, err)
	require.Equal(t, "1GB", cfg.RuntimeParams["temp_buffers"], "the URL's own setting wins")
	require.Equal(t, "32MB", cfg.RuntimeParams["work_mem"])
	require.Equal(t, "UTC", cfg.RuntimeParams["TimeZone"], "pinned settings are not the URL's to change")

	cfg, err = connConfig("postgres://u@localhost/db", "synchro-runner-control")
	require.NoError(t, err)
	_, set := cfg.RuntimeParams["temp_buffers"]
	require.False(t, set, "other sessions keep the server's defaults")
}

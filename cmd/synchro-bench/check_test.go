package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckRatios(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, os.WriteFile(path, []byte(`# Benchmarks

| metric | baseline | ours | ratio | target | verdict | date |
|---|---|---|---|---|---|---|
| materialize 1-row | raw decode 40,000 ev/s | 4,000 ev/s | 0.100 | ≥ 0.5 | BELOW | 2026-12-01 |
| fan-out | direct 2.9 s | 0.5 s | n/a | < 1 s | PASS | 2026-12-01 |

| materialize 1-row | later table | | 9.000 | | | |
`), 0o644))
	got, err := summaryRatios(path)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"materialize 1-row": 0.1}, got, "the first table only, rows with a ratio only")

	require.NoError(t, checkRatios(path, map[string]float64{"materialize 1-row": 0.051, "other": 1}, io.Discard))
	require.ErrorContains(t, checkRatios(path, map[string]float64{"materialize 1-row": 0.049}, io.Discard), "materialize 1-row")
	require.ErrorContains(t, checkRatios(path, map[string]float64{"other": 1}, io.Discard), "no measured ratio")
}

package synchro

import (
	"io/fs"
	"testing"

	"github.com/pressly/goose/v3"
)

// PackVersion is what goose records for the newest migration: the runner compares it
// with synchro.runner_pack_version().
func TestPackVersionIsGoosesNewest(t *testing.T) {
	names, err := fs.Glob(Migrations(), "*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("migrations: %v %d", err, len(names))
	}
	var newest int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		newest = max(newest, v)
	}
	if got := PackVersion(); got != newest {
		t.Fatalf("PackVersion() = %d, goose's newest migration is %d", got, newest)
	}
}

// Package tests holds the SQL behaviour tests: each test gets its own database from
// testdb, cloned from a template with the Synchro pack installed.
package tests

import (
	"testing"

	"github.com/synchro/synchro/tests/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

package tenure_test

import (
	"testing"

	"github.com/tenureq/tenure/internal/pgtest"
)

// TestMain lets the harness start a throwaway PostgreSQL cluster when no server answers (a
// fresh clone on a machine whose PostgreSQL is installed but not running), as every package
// whose tests need a database does.
func TestMain(m *testing.M) { pgtest.Main(m) }

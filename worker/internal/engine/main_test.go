package engine

import (
	"testing"

	"github.com/tenureq/tenure/internal/pgtest"
)

// TestMain finds or starts a PostgreSQL server for the engine's white-box tests that run
// statements (claimbatch_internal_test.go, staleplan_internal_test.go, ...).
func TestMain(m *testing.M) { pgtest.Main(m) }

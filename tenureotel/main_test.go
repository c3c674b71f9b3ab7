package tenureotel_test

import (
	"os"
	"testing"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) {
	// A re-executed test binary with envChild set is the worker process of
	// TestTraceCrossesProcesses, not a test run.
	if os.Getenv(envChild) != "" {
		os.Exit(childMain())
	}
	pgtest.Main(m)
}

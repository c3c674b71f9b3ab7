package faults_test

import (
	"os"
	"testing"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) {
	// A re-executed test binary with TENURE_FAULTS_CHILD set is a child worker of a scenario
	// (see child_test.go), not a test run.
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(childMain(mode))
	}
	pgtest.Main(m)
}

package pgfast_test

import (
	"testing"

	"github.com/tenureq/tenure/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

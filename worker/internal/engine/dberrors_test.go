package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// StalePlan recognises exactly PostgreSQL's refusal of a cached statement whose result type
// changed (the worker's retryStale re-runs only those): not another 0A000 (feature_not_supported), not
// another error.
func TestStalePlanClassification(t *testing.T) {
	stale := &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{stale, true},
		{fmt.Errorf("claim: %w", stale), true},
		{fmt.Errorf("tx: %w", fmt.Errorf("claim: %w", stale)), true},
		{&pgconn.PgError{Code: "0A000", Message: "FOR UPDATE cannot be applied to the nullable side of an outer join"}, false},
		{&pgconn.PgError{Code: "26000", Message: "prepared statement \"x\" does not exist"}, false},
		{&pgconn.PgError{Code: "40001", Message: "cached plan must not change result type"}, false},
		{errors.New("cached plan must not change result type"), false},
		{nil, false},
	} {
		if got := StalePlan(tc.err); got != tc.want {
			t.Errorf("StalePlan(%v) = %t, want %t", tc.err, got, tc.want)
		}
	}
}

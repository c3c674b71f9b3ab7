package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// retryStale re-runs a call only while it fails stale, and at most staleStatementsPerCall
// times per engine connection plus once (w.eng nil here: one try).
func TestRetryStaleBound(t *testing.T) {
	stale := &pgconn.PgError{Code: "0A000", Message: "cached plan must not change result type"}
	w := &Engine{m: newMetrics()}
	calls := 0
	err := w.retryStale(func() error { calls++; return stale })
	if !errors.Is(err, stale) || calls != 1 {
		t.Fatalf("without a pool: %d calls, err %v", calls, err)
	}
	calls = 0
	err = w.retryStale(func() error { calls++; return errors.New("other") })
	if err == nil || calls != 1 {
		t.Fatalf("another error is not retried: %d calls", calls)
	}
	pc, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?pool_max_conns=3")
	if err != nil {
		t.Fatal(err)
	}
	w.eng, err = pgxpool.NewWithConfig(context.Background(), pc) // connects lazily: never here
	if err != nil {
		t.Fatal(err)
	}
	defer w.eng.Close()
	for _, staleFor := range []int{0, 1, 5, 12, 13, 100} {
		calls = 0
		err = w.retryStale(func() error {
			calls++
			if calls <= staleFor {
				return stale
			}
			return nil
		})
		want, wantErr := staleFor+1, false
		if staleFor >= 1+staleStatementsPerCall*3 {
			want, wantErr = 1+staleStatementsPerCall*3, true
		}
		if calls != want || (err != nil) != wantErr {
			t.Errorf("stale for %d tries: %d calls (want %d), err %v", staleFor, calls, want, err)
		}
	}
}

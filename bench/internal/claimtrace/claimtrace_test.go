package claimtrace

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStatementName(t *testing.T) {
	for sql, want := range map[string]string{
		"-- name: ClaimOrdered :many\nWITH seg AS (...)": "ClaimOrdered",
		"-- name: ClaimLimitsLock :exec\nSELECT 1":       "ClaimLimitsLock",
		"SELECT 1":                      "",
		"  -- name: CompleteMany :many": "CompleteMany",
	} {
		if got := StatementName(sql); got != want {
			t.Errorf("StatementName(%q) = %q, want %q", sql, got, want)
		}
	}
	if !IsClaim("ClaimOrdered") || !IsClaim("ClaimSegments") || IsClaim("ClaimLimitsLock") || IsClaim("CompleteMany") || IsClaim("") {
		t.Error("IsClaim classifies wrongly")
	}
}

// 1..1000 ms recorded once each: p50 is 500 ms and p99 990 ms (nearest rank), within the
// histogram's relative error of 1/1024.
func TestIntervalPercentiles(t *testing.T) {
	tr := New()
	for i := 1; i <= 1000; i++ {
		tr.Record("ClaimOrdered", time.Duration(i)*time.Millisecond, nil)
	}
	tr.Record("ClaimOrdered", time.Hour, errors.New("boom")) // an error records no duration
	s := tr.Interval()
	if s.Count != 1000 {
		t.Fatalf("count %d, want 1000", s.Count)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want)/want > 1.0/1024+1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("p50", s.P50Ms, 500)
	near("p99", s.P99Ms, 990)
	near("mean", s.MeanMs, 500.5)
	near("max", s.MaxMs, 1000)
	if tr.Errors() != 1 {
		t.Errorf("errors %d, want 1", tr.Errors())
	}
	// The interval starts over; the total keeps everything.
	tr.Record("ClaimSegments", 2*time.Millisecond, nil)
	if s := tr.Interval(); s.Count != 1 || math.Abs(s.P99Ms-2) > 0.01 {
		t.Errorf("second interval %+v, want one claim of 2 ms", s)
	}
	if s := tr.Total(); s.Count != 1001 {
		t.Errorf("total count %d, want 1001", s.Count)
	}
	if got := tr.ByName(); got["ClaimOrdered"] != 1000 || got["ClaimSegments"] != 1 {
		t.Errorf("by name %v", got)
	}
	tr.Reset()
	if s := tr.Total(); s.Count != 0 || tr.Errors() != 0 {
		t.Errorf("after reset %+v errors %d", s, tr.Errors())
	}
}

// The tracer hooks time only claim statements and remember the last one's SQL and arguments.
func TestTracerHooks(t *testing.T) {
	tr := New()
	var _ pgx.QueryTracer = tr
	ctx := context.Background()
	claim := pgx.TraceQueryStartData{SQL: "-- name: ClaimOrdered :many\nSELECT", Args: []any{int32(7)}}
	c := tr.TraceQueryStart(ctx, nil, claim)
	time.Sleep(2 * time.Millisecond)
	tr.TraceQueryEnd(c, nil, pgx.TraceQueryEndData{})
	other := tr.TraceQueryStart(ctx, nil, pgx.TraceQueryStartData{SQL: "-- name: CompleteMany :many\nUPDATE"})
	tr.TraceQueryEnd(other, nil, pgx.TraceQueryEndData{})
	s := tr.Total()
	if s.Count != 1 || s.MaxMs < 2 {
		t.Fatalf("total %+v, want one claim of at least 2 ms", s)
	}
	sql, args := tr.Last()
	if sql != claim.SQL || len(args) != 1 || args[0] != int32(7) {
		t.Errorf("last = %q %v", sql, args)
	}
}

// A claim sent in a pipeline (the batched claim, a limited claim after its locks) is timed
// from the pipeline's start; the pipeline's other statements are not claims.
func TestTracerBatchHooks(t *testing.T) {
	tr := New()
	ctx := tr.TraceBatchStart(context.Background(), nil, pgx.TraceBatchStartData{})
	tr.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: "SELECT set_config('enable_bitmapscan', 'off', true)"})
	time.Sleep(2 * time.Millisecond)
	tr.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: "-- name: ClaimOrderedMany :many\nWITH req AS (...)"})
	tr.TraceBatchQuery(ctx, nil, pgx.TraceBatchQueryData{SQL: "-- name: ClaimOrderedMany :many\n", Err: errors.New("x")})
	tr.TraceBatchEnd(ctx, nil, pgx.TraceBatchEndData{})
	s := tr.Interval()
	if s.Count != 1 || s.MaxMs < 2 {
		t.Fatalf("batch claims: %+v", s)
	}
}

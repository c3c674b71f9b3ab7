// Package claimtrace measures Tenure's claim statement as its client sees it: a pgx
// QueryTracer, installed on the pool the worker runs its engine statements on
// (worker.Config.EnginePool), times every statement whose sqlc name starts with "Claim" from
// the moment pgx sends it until its result is read, and records the durations in a histogram
// that can be read and emptied per interval.
//
// The time a claim waits for a pool connection is not included (the tracer starts once the
// connection is held); worker.Stats().ClaimP99 includes it.
package claimtrace

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/bench/internal/hist"
)

// Tracer is a pgx.QueryTracer that times claim statements. Its zero value is not usable:
// call New.
type Tracer struct {
	mu       sync.Mutex
	interval *hist.Histogram // since the last Interval call
	total    *hist.Histogram // since New or Reset
	errors   int64
	byName   map[string]int64
	lastSQL  string
	lastArgs []any
}

// New returns an empty tracer.
func New() *Tracer {
	return &Tracer{interval: hist.New(), total: hist.New(), byName: map[string]int64{}}
}

type startKey struct{}

type started struct {
	at   time.Time
	name string
	sql  string
	args []any
}

// StatementName returns the sqlc name of a statement ("-- name: ClaimOrdered :many ..." gives
// "ClaimOrdered"), or "" when it has none.
func StatementName(sql string) string {
	i := strings.Index(sql, "-- name: ")
	if i < 0 {
		return ""
	}
	rest := sql[i+len("-- name: "):]
	if j := strings.IndexAny(rest, " \t\r\n"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// IsClaim reports whether a statement name is one of the engine's claim statements (the
// statements that select and lock ready jobs: ClaimStrict, ClaimOrdered, ClaimOrderedMany,
// ClaimFair, ClaimLimited, ClaimPermitted (ClaimSegments before issue 28); not ClaimLimitsLock,
// which only takes advisory locks).
func IsClaim(name string) bool {
	return strings.HasPrefix(name, "Claim") && name != "ClaimLimitsLock"
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	name := StatementName(data.SQL)
	if !IsClaim(name) {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, &started{at: time.Now(), name: name, sql: data.SQL, args: data.Args})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *Tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	s, ok := ctx.Value(startKey{}).(*started)
	if !ok {
		return
	}
	t.Record(s.name, time.Since(s.at), data.Err)
	if data.Err == nil {
		t.mu.Lock()
		t.lastSQL, t.lastArgs = s.sql, s.args
		t.mu.Unlock()
	}
}

type batchKey struct{}

// TraceBatchStart implements pgx.BatchTracer: a claim sent in a pipeline (the batched claim
// for many queues, a limited claim after its locks) is timed from the pipeline's start.
func (t *Tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, batchKey{}, time.Now())
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *Tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	at, ok := ctx.Value(batchKey{}).(time.Time)
	name := StatementName(data.SQL)
	if !ok || !IsClaim(name) {
		return
	}
	// Not kept for Last: the pipeline's other statements (locks, settings) are part of
	// how the claim runs, and an EXPLAIN of the claim alone would not show its plan.
	t.Record(name, time.Since(at), data.Err)
}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Record adds one claim statement's duration (err != nil counts an error and records
// nothing).
func (t *Tracer) Record(name string, d time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errors++
		return
	}
	t.interval.RecordDuration(d)
	t.total.RecordDuration(d)
	t.byName[name]++
}

// Summary is a histogram's count and quantiles, in milliseconds.
type Summary struct {
	Count  uint64  `json:"count"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Summarize reads a histogram recorded in microseconds.
func Summarize(h *hist.Histogram) Summary {
	return Summary{Count: h.Count(), MeanMs: h.Mean() / 1000, P50Ms: h.Quantile(0.50) / 1000,
		P99Ms: h.Quantile(0.99) / 1000, MaxMs: float64(h.Max()) / 1000}
}

// Interval returns the claims recorded since the previous Interval (or Reset) and starts a
// new interval.
func (t *Tracer) Interval() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Summarize(t.interval)
	t.interval.Reset()
	return s
}

// Total returns the claims recorded since New or Reset.
func (t *Tracer) Total() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Summarize(t.total)
}

// Reset empties both histograms and the counters (call it when the measured window starts).
func (t *Tracer) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.interval.Reset()
	t.total.Reset()
	t.errors = 0
	t.byName = map[string]int64{}
}

// Errors is the number of claim statements that failed since New or Reset.
func (t *Tracer) Errors() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errors
}

// ByName counts the recorded claims per statement name.
func (t *Tracer) ByName() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.byName))
	for k, v := range t.byName {
		out[k] = v
	}
	return out
}

// Last returns the SQL and arguments of the last claim that succeeded ("" if none), so the
// same statement can be explained afterwards.
func (t *Tracer) Last() (string, []any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastSQL, t.lastArgs
}

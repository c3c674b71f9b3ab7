package worker

import (
	"context"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.e.SkipDeregister() }

// NoRide makes w's completions go to the finishers only, as before they rode on claims
// (claim.go, "Completions ride on claims"), for tests and benchmarks that compare. Call it
// before Start.
func NoRide(w *Worker) { w.e.NoRide() }

// QueueStateReads is the queue state service's reads since Start (engine.QueueStateReads).
func QueueStateReads(w *Worker) int64 { return w.e.QueueStateReads() }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand

// RunPermitAllocate is the engine's allocation (its statements, in one pipeline).
// (default schema).
func RunPermitAllocate(ctx context.Context, pool engine.Batcher, p gen.PermitAllocateParams) ([]*gen.PermitAllocateRow, error) {
	return engine.RunPermitAllocate(ctx, pool, dbschema.Must(dbschema.Default), p)
}

// FakeClock is the fake clock of clock_test.go, for the external tests.
type FakeClock = engine.FakeClock

// UseFakeClock makes w's engine take its timing decisions (engine.Clock, worker/internal/engine/clock.go) on a fake clock that
// starts at start and moves only by Advance. Call it before Start.
func UseFakeClock(w *Worker, start time.Time) *FakeClock {
	f := engine.NewFakeClock(start)
	w.e.SetClock(f)
	return f
}

// ClaimBatchStats returns the batched claim statements w ran and the requests they carried.
func ClaimBatchStats(w *Worker) (statements, requests int64) {
	m := w.e.Metrics()
	return m.ClaimBatches.Load(), m.ClaimBatchRequests.Load()
}

// CheckProgress is Progress's validation.
var CheckProgress = checkProgress

// SetStatementDeadlines sets w's claim and finish statement deadlines (claimTimeout,
// finishTimeout by default, and for 0); it may be called while w runs.
func SetStatementDeadlines(w *Worker, claim, finish time.Duration) {
	w.e.SetStatementDeadlines(claim, finish)
}

package worker

import (
	"context"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/internal/dbschema"
)

// SkipDeregister makes Stop leave w's registry row behind, as a killed process would.
func SkipDeregister(w *Worker) { w.skipDeregister = true }

// SeededRand is seededRand for the external tests.
var SeededRand = seededRand

// RunPermitAllocate is the engine's allocation (its statements, in one pipeline).
// (default schema).
func RunPermitAllocate(ctx context.Context, pool batcher, p gen.PermitAllocateParams) ([]gen.PermitAllocateRow, error) {
	return runPermitAllocate(ctx, pool, dbschema.Must(dbschema.Default), p)
}

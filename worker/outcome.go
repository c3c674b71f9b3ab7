package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// This file is the public side of an attempt's end: Outcome (what Config.OnOutcome receives),
// and the handler-side helpers that act on the running attempt's finish (CompleteTx,
// SetOutput). The completion path itself (batched fenced finishes, stale writes, retries) is
// the engine's (worker/internal/engine/finish.go).

// Outcome reports the end of one attempt, after its fenced finish was written or rejected.
type Outcome struct {
	// Job is the attempt as claimed: the row its handler saw (Job.ID, Job.Kind, Job.Queue,
	// Job.Attempt, Job.Generation identify the attempt). It must not be modified.
	Job *generics.JobRow
	// Transition is one of the Outcome* names: "succeeded", "retried", "dead", "cancelled", "released" or "snoozed".
	Transition string
	Code       ErrorCode // empty on success
	Delay      time.Duration
	// HandlerErr is what the handler returned (nil on success).
	HandlerErr error
	// Err is nil when the fenced write landed; a *StaleWriteError (errors.Is ErrLostOwnership)
	// when the database rejected it; another error when it was abandoned.
	Err error
}

// CompleteTx completes the job inside the caller's transaction: the fenced running ->
// succeeded write joins tx, so the business writes and the completion commit or roll back
// together. It returns ErrLostOwnership (wrapped in a *StaleWriteError) when the job is no
// longer owned by this attempt: roll tx back then. Call it from the job's handler with the
// handler's context; the engine sees the commit and does not finish the job again.
func CompleteTx(ctx context.Context, tx pgx.Tx, job *generics.JobRow) error {
	return engine.CompleteTx(ctx, tx, job)
}

// MaxOutputBytes bounds the output a handler records with SetOutput, measured as the database
// measures it (bytes of jsonb text, generics.JSONSize): the database's own bound
// (generics.MaxOutputBytes, tenure.limit('output')), so an output SetOutput accepts is never
// refused by the finish that writes it.
const MaxOutputBytes = generics.MaxOutputBytes

// SetOutput records v, encoded as JSON, as the output of the running job. It is written with
// the job's success by the fenced completion (the engine's batched CompleteMany, or
// CompleteTx, which takes the output recorded before it is called), never by a write of its
// own, so a stale attempt's output can never land. A later call replaces an earlier one; a
// nil v (or JSON null) records none. An attempt that fails keeps its output in its entry of
// the error history (generics.AttemptError.Output), not in the job's Output. It
// returns ErrNotInHandler outside a running handler's context, ErrInvalidOutput (nothing
// changed) when v does not encode, holds what a jsonb cannot (a NUL character), or is larger
// than MaxOutputBytes as the database measures it (also errors.Is generics.ErrTooLarge).
func SetOutput(ctx context.Context, v any) error {
	e := engine.ExecutionFrom(ctx)
	if e == nil {
		return ErrNotInHandler
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOutput, err)
	}
	if err := generics.CheckJSON("output", b, MaxOutputBytes); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOutput, err)
	}
	if string(b) == "null" {
		e.SetOutput(nil)
		return nil
	}
	e.SetOutput(b)
	return nil
}

// RegistryTTLIntervals is how many registry intervals a worker's row outlives its last
// heartbeat: other workers delete rows older than that (the worker was killed).
const RegistryTTLIntervals = 6

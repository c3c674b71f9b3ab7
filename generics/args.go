package generics

import (
	"fmt"
)

// Args is implemented by every job args type. Kind names the job type in the database
// (stable; renaming it orphans stored jobs) and PayloadVersion is the version of the struct's
// encoded shape (>= 1; bump it and register an upgrader when the shape changes).
type Args interface {
	Kind() string
	PayloadVersion() int
}

// Validator is implemented by args types that check their own fields. Validate runs at
// enqueue (invalid args are never written) and after decoding (a stored payload that no longer
// validates fails permanently with code INVALID_PAYLOAD instead of retrying forever).
type Validator interface {
	Validate() error
}

// Job is one claimed attempt of a job, as handed to a handler: the decoded args and the
// stored job row (JobRow, embedded by pointer, so job.ID, job.Attempt, job.Generation ... read
// as the job's own fields). The row is the one the engine keeps for the attempt: middleware
// receives the same *JobRow, engine helpers (worker.CompleteTx, worker.Effect) take it as
// job.JobRow, and the attempt's worker.Outcome carries it. Handlers must not modify it.
//
// ID, ClaimToken and Generation identify this attempt: the claim token fences every write the
// worker makes about the job, and Generation (incremented on every claim) is the fencing
// number to pass to external systems that can reject stale writers.
type Job[A Args] struct {
	// Args is the decoded, upgraded and validated payload.
	Args A
	*JobRow
}

// EffectKey returns the stable idempotency key of the named effect of this job:
// "job:{id}:effect:{name}". It is identical across attempts, generations and reclaims, so a
// remote system that deduplicates by it applies the effect once however often the job runs.
func (j *Job[A]) EffectKey(name string) string { return EffectKey(j.ID, name) }

// EffectKey returns the stable idempotency key of effect name of job jobID.
func EffectKey(jobID int64, name string) string { return fmt.Sprintf("job:%d:effect:%s", jobID, name) }

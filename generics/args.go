package generics

import (
	"fmt"
	"time"

	"github.com/google/uuid"
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
// attempt itself (JobMeta, embedded, so job.ID, job.Attempt, job.Generation ... read as the
// job's own fields). JobMeta is the one record of an attempt: the engine keeps it per
// execution, middleware receives it, and non-generic helpers take it through AnyJob.
//
// ID, ClaimToken and Generation identify this attempt: the claim token fences every write the
// worker makes about the job, and Generation (incremented on every claim) is the fencing
// number to pass to external systems that can reject stale writers.
type Job[A Args] struct {
	// Args is the decoded, upgraded and validated payload.
	Args A
	JobMeta
}

// EffectKey returns the stable idempotency key of the named effect of this job:
// "job:{id}:effect:{name}". It is identical across attempts, generations and reclaims, so a
// remote system that deduplicates by it applies the effect once however often the job runs.
func (j *Job[A]) EffectKey(name string) string { return EffectKey(j.ID, name) }

// Meta returns the attempt without the args, for code that is not generic.
func (j *Job[A]) Meta() JobMeta { return j.JobMeta }

// AnyJob is a claimed job of any args type: *Job[A] for every A. The engine helpers that need
// only the attempt's identity (worker.CompleteTx, worker.Effect) take it.
type AnyJob interface {
	Meta() JobMeta
}

// JobMeta is one claimed attempt of a job, without its args: what the claim statement
// returned, as the engine keeps it, middleware sees it and Job[A] carries it.
type JobMeta struct {
	ID       int64
	Kind     string
	Queue    string
	Priority int
	// Attempt is 1 on the first attempt; MaxAttempts the job's budget.
	Attempt, MaxAttempts int
	Generation           int64
	ClaimToken           uuid.UUID
	// RunAt is when the job became due (the enqueue time, a scheduled time, or a retry time).
	RunAt     time.Time
	CreatedAt time.Time
	// ClaimedAt and LeaseUntil come from the database clock at claim time; Lease is the lease
	// length heartbeats extend by.
	ClaimedAt  time.Time
	LeaseUntil time.Time
	Lease      time.Duration
	// Metadata is what the enqueuer attached to the job (jobs.InsertOpts.Metadata), such as
	// a W3C trace context; nil when none. Each attempt gets its own map.
	Metadata map[string]string
	// Tags are the job's tags (jobs.InsertOpts.Tags); nil when none.
	Tags []string
	// Snoozes counts the times this job snoozed before this attempt (worker.Snooze).
	Snoozes int
}

// EffectKey returns the stable idempotency key of effect name of job jobID.
func EffectKey(jobID int64, name string) string { return fmt.Sprintf("job:%d:effect:%s", jobID, name) }

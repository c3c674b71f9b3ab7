package generics

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// JobState is a job's lifecycle state.
type JobState string

// The job states. A cancel request on a running job is not a state: it is
// JobRow.CancelRequestedAt on a running job, which the owning worker turns into
// JobStateCancelled.
const (
	JobStateReady     JobState = "ready"     // waiting for run_at, then claimable
	JobStateRunning   JobState = "running"   // owned by a worker under a lease and a claim token
	JobStateSucceeded JobState = "succeeded" // final
	JobStateDead      JobState = "dead"      // final until an operator re-injects it
	JobStateCancelled JobState = "cancelled" // final
	// JobStateWaiting: a workflow task or sequence job waiting for its dependencies
	// (JobRow.DepsPending of them unresolved); never claimed until the finish of its last
	// dependency releases it (ready) or cancels it, in that finish's transaction.
	JobStateWaiting JobState = "waiting"
)

// Final reports whether s is a final state.
func (s JobState) Final() bool {
	return s == JobStateSucceeded || s == JobStateDead || s == JobStateCancelled
}

// Valid reports whether s is one of the six states.
func (s JobState) Valid() bool {
	switch s {
	case JobStateReady, JobStateRunning, JobStateSucceeded, JobStateDead, JobStateCancelled, JobStateWaiting:
		return true
	}
	return false
}

// AttemptError is one entry of a job's bounded error history (the last 10 failures).
type AttemptError struct {
	Attempt    int       `json:"attempt"`
	Generation int64     `json:"generation"`
	Code       string    `json:"code"`
	Message    string    `json:"message"`
	At         time.Time `json:"at"`
	// Output is what the failed attempt recorded with worker.SetOutput; nil when none.
	Output json.RawMessage `json:"output,omitempty"`
	// Progress is the failed attempt's last progress (worker.Progress); nil when none.
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is a running attempt's progress as its handler reported it (worker.Progress) and
// the engine wrote it with the attempt's heartbeat or finish.
type Progress struct {
	// Done of Total units (Total 0: unknown).
	Done  int64 `json:"done"`
	Total int64 `json:"total"`
	// Msg is the handler's short message (may be empty).
	Msg string `json:"msg,omitempty"`
	// At is when the handler reported it (the worker's clock).
	At time.Time `json:"at"`
}

// JobRow is a job as stored: the one public record of a job. jobs.Client's Insert*, Get and
// List return it, the engine claims into it (Job[A] embeds it, middleware and worker.Outcome
// carry it) and package tenuretest finds it.
//
// A row a worker claimed carries the columns the claim statement returns: identity, payload,
// scheduling, the attempt and its lease, metadata, tags and snoozes; the job's error history
// (LastErrorCode, Errors), Output, FinishedAt, CancelRequestedAt, unique key and the workflow
// and sequence fields are not loaded there (read them with jobs.Client.Get).
type JobRow struct {
	ID       int64
	Kind     string
	Queue    string
	Priority int
	State    JobState

	// Payload is the encoded args, as stored (version PayloadVersion, before any upgrade).
	Payload        json.RawMessage
	PayloadVersion int

	// RunAt is when the job became due (the enqueue time, a scheduled time, or a retry time).
	RunAt     time.Time
	CreatedAt time.Time
	UpdatedAt time.Time
	// FinishedAt is set once the job reached a final state.
	FinishedAt *time.Time
	// CancelRequestedAt is set when an operator asked a running job to stop.
	CancelRequestedAt *time.Time

	// Attempt is the number of attempts started: 0 before the first claim, 1 during the first
	// attempt. MaxAttempts is the job's budget.
	Attempt, MaxAttempts int
	// Lease is the lease length a claim owns the job for and heartbeats extend by.
	Lease time.Duration
	// LockedBy, LockedUntil and ClaimToken are set while the job is claimed: the owning
	// worker's id, the lease end and the token that fences the owner's writes (all from the
	// database clock at claim time on a claimed row).
	LockedBy    string
	LockedUntil *time.Time
	ClaimToken  *uuid.UUID
	// Generation counts the claims of the job: the fencing number of the current attempt.
	Generation int64
	// AttemptedAt is when the latest attempt was claimed (database clock); nil before the
	// first claim.
	AttemptedAt *time.Time
	// Snoozes counts the times the job snoozed (worker.Snooze) before this attempt.
	Snoozes int

	// LastErrorCode is the code of the latest failure; Errors the last 10 failures.
	LastErrorCode string
	Errors        []AttemptError
	// Metadata is what the enqueuer attached (jobs.InsertOpts.Metadata), such as a W3C
	// trace context; nil when none.
	Metadata map[string]string
	// Tags are the job's tags (jobs.InsertOpts.Tags); nil when none.
	Tags []string
	// Output is what the handler recorded with worker.SetOutput, written with its success;
	// nil when none.
	Output json.RawMessage
	// Progress is the running (or last, for a final job) attempt's progress, written with its
	// heartbeats and its finish (worker.Progress); nil when none was reported. A retry clears
	// it; the failed attempt's entry in Errors keeps it.
	Progress *Progress
	// UniqueKey is the job's unique key (a SHA-256 digest) when it was inserted unique, and
	// UniqueStates the states in which it holds that key; nil otherwise.
	UniqueKey    []byte
	UniqueStates []JobState

	// WorkflowID and TaskName identify the workflow the job is a task of
	// (jobs.Client.InsertWorkflowTx) and its name there; nil and "" otherwise.
	WorkflowID *uuid.UUID
	TaskName   string
	// SequenceKey is the sequence the job runs in (jobs.InsertOpts.Sequence); "" when none.
	SequenceKey string
	// DepsPending counts the dependencies of a waiting job that have not resolved yet.
	DepsPending int
	// HasDependents is set when other jobs wait for this one.
	HasDependents bool
}

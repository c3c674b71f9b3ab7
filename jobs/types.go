package jobs

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/db/gen"
)

// State is a job's lifecycle state.
type State string

// The job states. A cancel request on a running job is not a state: it is Row.CancelRequestedAt
// on a running job, which the owning worker turns into StateCancelled.
const (
	StateReady     State = "ready"     // waiting for run_at, then claimable
	StateRunning   State = "running"   // owned by a worker under a lease and a claim token
	StateSucceeded State = "succeeded" // final
	StateDead      State = "dead"      // final until an operator re-injects it
	StateCancelled State = "cancelled" // final
)

// Final reports whether s is a final state.
func (s State) Final() bool { return s == StateSucceeded || s == StateDead || s == StateCancelled }

// Valid reports whether s is one of the five states.
func (s State) Valid() bool {
	switch s {
	case StateReady, StateRunning, StateSucceeded, StateDead, StateCancelled:
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
}

// Row is a job as stored.
type Row struct {
	ID                int64
	Queue             string
	Kind              string
	Payload           json.RawMessage
	PayloadVersion    int
	State             State
	Priority          int
	RunAt             time.Time
	Attempts          int
	MaxAttempts       int
	Lease             time.Duration
	LockedBy          string
	LockedUntil       *time.Time
	ClaimToken        *uuid.UUID
	Generation        int64
	AttemptedAt       *time.Time
	LastErrorCode     string
	Errors            []AttemptError
	CreatedAt         time.Time
	UpdatedAt         time.Time
	FinishedAt        *time.Time
	CancelRequestedAt *time.Time
	// Metadata is what the enqueuer attached (InsertOpts.Metadata); nil when none.
	Metadata map[string]string
	// Tags are the job's tags (InsertOpts.Tags); nil when none.
	Tags []string
	// Output is what the handler recorded with worker.SetOutput, written with its success;
	// nil when none.
	Output json.RawMessage
	// Snoozes counts the times the job snoozed (worker.Snooze).
	Snoozes int
	// UniqueKey is the job's unique key (a SHA-256 digest) when it was inserted unique, and
	// UniqueStates the states in which it holds that key; nil otherwise.
	UniqueKey    []byte
	UniqueStates []State
	// Duplicate is set on the Row an Insert returns when the job was unique and another job
	// held its key: nothing was inserted and this Row is that other job. Reads (Get, List)
	// leave it false.
	Duplicate bool
}

// rowFromGen converts a stored job. A column it cannot decode is an ErrCorruptRow error, never
// a silently emptied field.
func rowFromGen(j gen.TenureJob) (*Row, error) {
	r := &Row{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: json.RawMessage(j.Payload),
		PayloadVersion: int(j.PayloadVersion), State: State(j.State), Priority: int(j.Priority),
		RunAt: j.RunAt, Attempts: int(j.Attempts), MaxAttempts: int(j.MaxAttempts),
		Lease: time.Duration(j.LeaseMs) * time.Millisecond, LockedUntil: j.LockedUntil,
		ClaimToken: j.ClaimToken, Generation: j.Generation, AttemptedAt: j.AttemptedAt,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt,
		CancelRequestedAt: j.CancelRequestedAt, Snoozes: int(j.Snoozes), UniqueKey: j.UniqueKey,
	}
	if len(j.Tags) > 0 {
		r.Tags = j.Tags
	}
	if len(j.Output) > 0 {
		r.Output = json.RawMessage(j.Output)
	}
	if j.UniqueStates != nil {
		r.UniqueStates = statesFromBits(*j.UniqueStates)
	}
	if j.LockedBy != nil {
		r.LockedBy = *j.LockedBy
	}
	if j.LastErrorCode != nil {
		r.LastErrorCode = *j.LastErrorCode
	}
	if len(j.Metadata) > 0 && string(j.Metadata) != "{}" {
		if err := json.Unmarshal(j.Metadata, &r.Metadata); err != nil {
			return nil, fmt.Errorf("%w: job %d: column metadata: %w", ErrCorruptRow, j.ID, err)
		}
	}
	if len(j.Errors) > 0 {
		if err := json.Unmarshal(j.Errors, &r.Errors); err != nil {
			return nil, fmt.Errorf("%w: job %d: column errors: %w", ErrCorruptRow, j.ID, err)
		}
	}
	return r, nil
}

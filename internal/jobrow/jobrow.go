// Package jobrow converts stored job rows (db/gen) to the public generics.JobRow, for package
// jobs and package tenuretest.
package jobrow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// StateBits are the bits of the unique_states column.
var StateBits = map[generics.JobState]int16{generics.JobStateReady: 1, generics.JobStateRunning: 2,
	generics.JobStateSucceeded: 4, generics.JobStateDead: 8, generics.JobStateCancelled: 16}

// StatesFromBits lists the states of a stored unique_states bitmask.
func StatesFromBits(b int16) []generics.JobState {
	var out []generics.JobState
	for _, s := range []generics.JobState{generics.JobStateReady, generics.JobStateRunning, generics.JobStateSucceeded, generics.JobStateDead, generics.JobStateCancelled} {
		if b&StateBits[s] != 0 {
			out = append(out, s)
		}
	}
	return out
}

// FromGen converts a stored job to the public row. A column it cannot decode is an error
// wrapping corrupt (jobs.ErrCorruptRow), never a silently emptied field.
func FromGen(j gen.TenureJob, corrupt error) (*generics.JobRow, error) {
	r := &generics.JobRow{
		ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: json.RawMessage(j.Payload),
		PayloadVersion: int(j.PayloadVersion), State: generics.JobState(j.State), Priority: int(j.Priority),
		RunAt: j.RunAt, Attempt: int(j.Attempts), MaxAttempts: int(j.MaxAttempts),
		Lease: time.Duration(j.LeaseMs) * time.Millisecond, LockedUntil: j.LockedUntil,
		ClaimToken: j.ClaimToken, Generation: j.Generation, AttemptedAt: j.AttemptedAt,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, FinishedAt: j.FinishedAt,
		CancelRequestedAt: j.CancelRequestedAt, Snoozes: int(j.Snoozes), UniqueKey: j.UniqueKey,
		WorkflowID: j.WorkflowID, HasDependents: j.HasDependents.Valid && j.HasDependents.Bool,
	}
	if j.DepsPending != nil {
		r.DepsPending = int(*j.DepsPending)
	}
	if j.TaskName != nil {
		r.TaskName = *j.TaskName
	}
	if j.SequenceKey != nil {
		r.SequenceKey = *j.SequenceKey
	}
	if len(j.Tags) > 0 {
		r.Tags = j.Tags
	}
	if len(j.Output) > 0 {
		r.Output = json.RawMessage(j.Output)
	}
	if j.UniqueStates != nil {
		r.UniqueStates = StatesFromBits(*j.UniqueStates)
	}
	if j.LockedBy != nil {
		r.LockedBy = *j.LockedBy
	}
	if j.LastErrorCode != nil {
		r.LastErrorCode = *j.LastErrorCode
	}
	if len(j.Metadata) > 0 && string(j.Metadata) != "{}" {
		if err := json.Unmarshal(j.Metadata, &r.Metadata); err != nil {
			return nil, fmt.Errorf("%w: job %d: column metadata: %w", corrupt, j.ID, err)
		}
	}
	if len(j.Progress) > 0 && string(j.Progress) != "null" {
		r.Progress = new(generics.Progress)
		if err := json.Unmarshal(j.Progress, r.Progress); err != nil {
			return nil, fmt.Errorf("%w: job %d: column progress: %w", corrupt, j.ID, err)
		}
	}
	if len(j.Errors) > 0 && string(j.Errors) != "[]" {
		if err := json.Unmarshal(j.Errors, &r.Errors); err != nil {
			return nil, fmt.Errorf("%w: job %d: column errors: %w", corrupt, j.ID, err)
		}
	}
	return r, nil
}

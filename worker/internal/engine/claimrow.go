package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
)

// ClaimRow is what every claim statement returns (db/queries.sql, "Claim"): the columns of
// the rows tenure.own owned (the one ownership statement, migration 0019) and feedback, what
// the claim mode learnt (a JSON object, NULL for the plain modes: ClaimStrict, ClaimOrdered,
// ClaimOrderedMany). A claim that owned nothing returns one row of NULL job columns carrying the
// feedback. sqlc generates one row type per statement; they are the same struct, and
// OwnedRows converts each to this one.
type ClaimRow = gen.ClaimStrictRow

// ClaimRows are the row types sqlc generates for the claim statements (identical structs).
type ClaimRows interface {
	gen.ClaimStrictRow | gen.ClaimOrderedRow | gen.ClaimOrderedManyRow |
		gen.ClaimFairRow | gen.ClaimLimitedRow | gen.ClaimPermittedRow
}

// OwnedRows converts what a claim statement returned to ClaimRow: the owned rows (each keeps
// its feedback), and the statement's feedback (the first row's; nil for the plain modes).
func OwnedRows[R ClaimRows](got []*R) (rows []ClaimRow, feedback []byte) {
	rows = make([]ClaimRow, 0, len(got))
	for i := range got {
		r := ClaimRow(*got[i])
		if i == 0 {
			feedback = r.Feedback
		}
		if r.ID != nil { // nil: the feedback-only row of a claim that owned nothing
			rows = append(rows, r)
		}
	}
	return rows, feedback
}

// DecodeFeedback decodes a claim's feedback into the mode's struct (left as is when NULL).
func DecodeFeedback(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("tenure: claim feedback %s: %w", b, err)
	}
	return nil
}

// ToJobRow is the one conversion from what a claim statement returned (an owned row:
// OwnedRows) to the row the attempt is run with (which the handler, middleware and the
// Outcome see), and the attempt's claim token, which fences every write about it. The claim set state running, locked_by
// (workerID) and updated_at (the claim time, attempted_at); the columns it does not return
// (the error history, output, unique key) stay unset.
func ToJobRow(r ClaimRow, workerID string) (*generics.JobRow, uuid.UUID) {
	return &generics.JobRow{
		ID: deref0(r.ID), Queue: deref0(r.Queue), Kind: deref0(r.Kind), Priority: int(deref0(r.Priority)),
		State: generics.JobStateRunning, Payload: r.Payload, PayloadVersion: int(deref0(r.PayloadVersion)),
		RunAt: deref0(r.RunAt), CreatedAt: deref0(r.CreatedAt), UpdatedAt: deref(r.AttemptedAt), AttemptedAt: r.AttemptedAt,
		LockedBy: workerID, LockedUntil: r.LockedUntil, Attempt: int(deref0(r.Attempts)), MaxAttempts: int(deref0(r.MaxAttempts)),
		Lease:      time.Duration(deref0(r.LeaseMs)) * time.Millisecond,
		ClaimToken: r.ClaimToken, Generation: deref0(r.Generation), Metadata: DecodeMetadata(r.Metadata),
		Tags: nilIfEmpty(r.Tags), Snoozes: int(deref0(r.Snoozes))}, derefUUID(r.ClaimToken)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// DecodeMetadata decodes the metadata column. The database holds it to an object of strings;
// anything else (a manual edit) is dropped rather than failing the job: metadata is context
// for the handler, never its arguments.
func DecodeMetadata(b []byte) map[string]string {
	if len(b) == 0 || string(b) == "{}" {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func derefUUID(u *uuid.UUID) uuid.UUID {
	if u == nil {
		return uuid.Nil
	}
	return *u
}

func deref0[T any](p *T) T {
	var z T
	if p == nil {
		return z
	}
	return *p
}

package main

import (
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// The -json output of the CLI: its own types, with explicit snake_case field names, so that a
// field renamed in package jobs does not silently change a script's input. The schema is
// documented in doc.go ("JSON output") and pinned by TestJSONSchema: renaming or removing a
// field is a breaking change; adding one is not. Every field is always present (null when it
// has no value; lists are [] and maps {} when empty). Times are RFC 3339 in UTC with up to
// nanosecond precision; durations are float seconds, in fields named *_seconds.

// jsonJob is a job (tenure jobs get -json, and each of list's jobs).
type jsonJob struct {
	ID                int64             `json:"id"`
	Queue             string            `json:"queue"`
	Kind              string            `json:"kind"`
	Payload           json.RawMessage   `json:"payload"`
	PayloadVersion    int               `json:"payload_version"`
	State             string            `json:"state"`
	Priority          int               `json:"priority"`
	RunAt             time.Time         `json:"run_at"`
	Attempts          int               `json:"attempts"`
	MaxAttempts       int               `json:"max_attempts"`
	LeaseSeconds      float64           `json:"lease_seconds"`
	LockedBy          *string           `json:"locked_by"`
	LockedUntil       *time.Time        `json:"locked_until"`
	ClaimToken        *string           `json:"claim_token"`
	Generation        int64             `json:"generation"`
	AttemptedAt       *time.Time        `json:"attempted_at"`
	LastErrorCode     *string           `json:"last_error_code"`
	Errors            []jsonAttempt     `json:"errors"`
	CreatedAt         time.Time         `json:"created_at"`
	UpdatedAt         time.Time         `json:"updated_at"`
	FinishedAt        *time.Time        `json:"finished_at"`
	CancelRequestedAt *time.Time        `json:"cancel_requested_at"`
	Metadata          map[string]string `json:"metadata"`
	Tags              []string          `json:"tags"`
	Output            json.RawMessage   `json:"output"`
	Snoozes           int               `json:"snoozes"`
	UniqueKey         *string           `json:"unique_key"`
	UniqueStates      []string          `json:"unique_states"`
	// Workflows and sequences (issue 30): null when the job is in none.
	WorkflowID  *string `json:"workflow_id"`
	TaskName    *string `json:"task_name"`
	SequenceKey *string `json:"sequence_key"`
	DepsPending int     `json:"deps_pending"`
	// Progress is the running (or last) attempt's progress (worker.Progress); null when none.
	Progress *generics.Progress `json:"progress"`
	// ElapsedSeconds is how long the running (or last) attempt ran; null before any attempt.
	ElapsedSeconds *float64 `json:"elapsed_seconds"`
	// TimeoutSeconds is the kind's handler timeout as its workers publish it (jobs get only;
	// null in lists and when no worker publishes the kind).
	TimeoutSeconds *float64 `json:"timeout_seconds"`
}

// jsonAttempt is one entry of a job's error history.
type jsonAttempt struct {
	Attempt    int       `json:"attempt"`
	Generation int64     `json:"generation"`
	Code       string    `json:"code"`
	Message    string    `json:"message"`
	At         time.Time `json:"at"`
	// Output and Progress are what the failed attempt recorded; null when none.
	Output   json.RawMessage    `json:"output"`
	Progress *generics.Progress `json:"progress"`
}

// jsonPage is tenure jobs list -json.
type jsonPage struct {
	Jobs []jsonJob `json:"jobs"`
	// NextAfterID is the -after of the next page; null on the last page.
	NextAfterID *int64 `json:"next_after_id"`
}

// jsonStats is tenure jobs stats -json.
type jsonStats struct {
	WindowSeconds float64         `json:"window_seconds"`
	Bands         []jsonBand      `json:"bands"`
	TopDeadCodes  []jsonDeadCodes `json:"top_dead_codes"`
	Unserved      []jsonUnserved  `json:"unserved"`
	// UnservedKinds: ready jobs no live worker can run (jobs.Stats.Unserved).
	UnservedKinds []jsonUnservedKind `json:"unserved_kinds"`
	// DeleteOnSuccessKinds: kinds whose succeeded jobs leave no row (jobs.Stats.DeleteOnSuccess).
	DeleteOnSuccessKinds []string `json:"delete_on_success_kinds"`
}

type jsonUnservedKind struct {
	Queue          string `json:"queue"`
	Kind           string `json:"kind"`
	Ready          int64  `json:"ready"`
	QueueServed    bool   `json:"queue_served"`
	KindRegistered bool   `json:"kind_registered"`
}

type jsonBand struct {
	Queue                 string  `json:"queue"`
	Priority              int     `json:"priority"`
	Ready                 int64   `json:"ready"`
	Scheduled             int64   `json:"scheduled"`
	Running               int64   `json:"running"`
	CancelRequested       int64   `json:"cancel_requested"`
	Dead                  int64   `json:"dead"`
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
	ReadyAgeP50Seconds    float64 `json:"ready_age_p50_seconds"`
	ReadyAgeP95Seconds    float64 `json:"ready_age_p95_seconds"`
	Finished              int64   `json:"finished"`
	Succeeded             int64   `json:"succeeded"`
	WaitP50Seconds        float64 `json:"wait_p50_seconds"`
	WaitP95Seconds        float64 `json:"wait_p95_seconds"`
	WaitP99Seconds        float64 `json:"wait_p99_seconds"`
	QueueServed           bool    `json:"queue_served"`
	UnservedJobs          int64   `json:"unserved_jobs"`
}

type jsonDeadCodes struct {
	Queue string `json:"queue"`
	Kind  string `json:"kind"`
	Code  string `json:"code"`
	Jobs  int64  `json:"jobs"`
}

type jsonUnserved struct {
	Queue                 string  `json:"queue"`
	Ready                 int64   `json:"ready"`
	OldestReadyAgeSeconds float64 `json:"oldest_ready_age_seconds"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func jsonJobOf(r *generics.JobRow) jsonJob {
	j := jsonJob{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, Payload: r.Payload, PayloadVersion: r.PayloadVersion,
		State: string(r.State), Priority: r.Priority, RunAt: utc(r.RunAt), Attempts: r.Attempt,
		MaxAttempts: r.MaxAttempts, LeaseSeconds: seconds(r.Lease), LockedBy: strPtr(r.LockedBy),
		LockedUntil: utcPtr(r.LockedUntil), Generation: r.Generation, AttemptedAt: utcPtr(r.AttemptedAt),
		LastErrorCode: strPtr(r.LastErrorCode), Errors: make([]jsonAttempt, 0, len(r.Errors)),
		CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt), FinishedAt: utcPtr(r.FinishedAt),
		CancelRequestedAt: utcPtr(r.CancelRequestedAt), Metadata: map[string]string{}, Tags: []string{},
		Output: r.Output, Snoozes: r.Snoozes, UniqueStates: []string{},
	}
	if len(j.Payload) == 0 {
		j.Payload = json.RawMessage("null")
	}
	if len(j.Output) == 0 {
		j.Output = json.RawMessage("null")
	}
	if r.ClaimToken != nil {
		s := r.ClaimToken.String()
		j.ClaimToken = &s
	}
	for _, e := range r.Errors {
		a := jsonAttempt{Attempt: e.Attempt, Generation: e.Generation, Code: e.Code, Message: e.Message, At: utc(e.At),
			Output: e.Output, Progress: e.Progress}
		if len(a.Output) == 0 {
			a.Output = json.RawMessage("null")
		}
		j.Errors = append(j.Errors, a)
	}
	for k, v := range r.Metadata {
		j.Metadata[k] = v
	}
	j.Progress = r.Progress
	if d, ok := attemptElapsed(r, time.Now()); ok {
		sec := d.Seconds()
		j.ElapsedSeconds = &sec
	}
	j.Tags = append(j.Tags, r.Tags...)
	if r.UniqueKey != nil {
		s := hex.EncodeToString(r.UniqueKey)
		j.UniqueKey = &s
	}
	for _, s := range r.UniqueStates {
		j.UniqueStates = append(j.UniqueStates, string(s))
	}
	if r.WorkflowID != nil {
		s := r.WorkflowID.String()
		j.WorkflowID = &s
	}
	j.TaskName, j.SequenceKey, j.DepsPending = strPtr(r.TaskName), strPtr(r.SequenceKey), r.DepsPending
	return j
}

func jsonPageOf(p *jobs.Page) jsonPage {
	out := jsonPage{Jobs: make([]jsonJob, 0, len(p.Jobs))}
	for _, r := range p.Jobs {
		out.Jobs = append(out.Jobs, jsonJobOf(r))
	}
	if p.NextAfterID != 0 {
		id := p.NextAfterID
		out.NextAfterID = &id
	}
	return out
}

func jsonStatsOf(s *jobs.Stats, unserved []unservedQueue) jsonStats {
	out := jsonStats{WindowSeconds: seconds(s.Window), Bands: make([]jsonBand, 0, len(s.Bands)),
		TopDeadCodes: make([]jsonDeadCodes, 0, len(s.TopDeadCodes)), Unserved: make([]jsonUnserved, 0, len(unserved))}
	for _, b := range s.Bands {
		out.Bands = append(out.Bands, jsonBand{
			Queue: b.Queue, Priority: b.Priority, Ready: b.Ready, Scheduled: b.Scheduled, Running: b.Running,
			CancelRequested: b.CancelRequested, Dead: b.Dead, OldestReadyAgeSeconds: seconds(b.OldestReadyAge),
			ReadyAgeP50Seconds: seconds(b.ReadyAgeP50), ReadyAgeP95Seconds: seconds(b.ReadyAgeP95),
			Finished: b.Finished, Succeeded: b.Succeeded, WaitP50Seconds: seconds(b.WaitP50),
			WaitP95Seconds: seconds(b.WaitP95), WaitP99Seconds: seconds(b.WaitP99),
			QueueServed: b.QueueServed, UnservedJobs: b.Unserved,
		})
	}
	for _, d := range s.TopDeadCodes {
		out.TopDeadCodes = append(out.TopDeadCodes, jsonDeadCodes{Queue: d.Queue, Kind: d.Kind, Code: d.Code, Jobs: d.Jobs})
	}
	for _, u := range unserved {
		out.Unserved = append(out.Unserved, jsonUnserved{Queue: u.Queue, Ready: u.Ready, OldestReadyAgeSeconds: seconds(u.OldestReadyAge)})
	}
	out.UnservedKinds = make([]jsonUnservedKind, 0, len(s.Unserved))
	for _, u := range s.Unserved {
		out.UnservedKinds = append(out.UnservedKinds, jsonUnservedKind{Queue: u.Queue, Kind: u.Kind, Ready: u.Ready,
			QueueServed: u.QueueServed, KindRegistered: u.KindRegistered})
	}
	out.DeleteOnSuccessKinds = append([]string{}, s.DeleteOnSuccess...)
	return out
}

// attemptElapsed is how long r's running (or last) attempt ran, by its claim time; false
// before any attempt.
func attemptElapsed(r *generics.JobRow, now time.Time) (time.Duration, bool) {
	if r.AttemptedAt == nil {
		return 0, false
	}
	end := now
	if r.State != generics.JobStateRunning {
		if r.FinishedAt == nil {
			return 0, false
		}
		end = *r.FinishedAt
	}
	return max(end.Sub(*r.AttemptedAt), 0), true
}

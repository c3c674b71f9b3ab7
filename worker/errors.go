package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// ErrorCode is the bounded vocabulary a failure is classified into. Codes go into the job's
// last_error_code and metric labels; messages go to logs and the job's error history only.
type ErrorCode string

// The error codes. Each is retryable (the job goes back to ready with backoff while attempts
// remain) or permanent (the job goes dead at once).
const (
	CodeHandlerError    ErrorCode = "HANDLER_ERROR"          // retryable: a plain error from the handler
	CodeTimeout         ErrorCode = "TIMEOUT"                // retryable: the handler ran past its timeout
	CodeRateLimit       ErrorCode = "RATE_LIMIT"             // retryable: a remote asked to slow down
	CodeRemoteError     ErrorCode = "TRANSIENT_REMOTE_ERROR" // retryable: a remote failed transiently
	CodeLeaseExpired    ErrorCode = "LEASE_EXPIRED"          // retryable: the owner's lease ran out (reclaim)
	CodePanic           ErrorCode = "PANIC"                  // retryable: the handler panicked
	CodeUnknownKind     ErrorCode = "UNKNOWN_KIND"           // retryable: no handler here (claims skip such kinds; kept for old rows)
	CodeInvalidPayload  ErrorCode = "INVALID_PAYLOAD"        // permanent: the payload cannot be decoded/validated
	CodePermanentRemote ErrorCode = "PERMANENT_REMOTE_ERROR" // permanent: a remote rejected the request for good
	CodePermanent       ErrorCode = "PERMANENT"              // permanent: the handler said so
	CodeCancelled       ErrorCode = "CANCELLED"              // final: an operator cancelled the job
	CodeSnoozeLimit     ErrorCode = "SNOOZE_LIMIT"           // retryable: the handler snoozed past HandlerOptions.MaxSnoozes
	// final: a workflow task cancelled, without an attempt, because a dependency ended dead or
	// cancelled (written by the database's release, docs/guide.md §23)
	CodeDependencyFailed ErrorCode = "DEPENDENCY_FAILED"
)

// Permanent reports whether a failure with this code goes straight to dead.
func (c ErrorCode) Permanent() bool { return engine.ErrorCode(c).Permanent() }

// Valid reports whether c is one of the codes above.
func (c ErrorCode) Valid() bool { return engine.ErrorCode(c).Valid() }

// ErrLeaseLost is the cause of a handler context cancelled because the job's lease is gone
// (a heartbeat changed 0 rows, or two heartbeats in a row failed). The handler must stop
// before its next side effect; whatever it returns is fenced out.
var ErrLeaseLost = errors.New("tenure: lease lost")

// ErrJobCancelled is the cause of a handler context cancelled by an operator's cancel request.
var ErrJobCancelled = errors.New("tenure: job cancelled by operator")

// ErrWorkerStopping is the cause of a handler context cancelled by a hard stop. The job is
// released back to ready without charging the attempt.
var ErrWorkerStopping = errors.New("tenure: worker stopping")

// ErrHandlerTimeout is the cause of a handler context that ran past its timeout.
var ErrHandlerTimeout = errors.New("tenure: handler timeout")

// ErrLostOwnership means a fenced write changed 0 rows: another worker owns the job now (or it
// was finished, cancelled or reclaimed). It is never a success. Returned by CompleteTx and
// Effect; counted by the engine as a stale write.
var ErrLostOwnership = errors.New("tenure: lost ownership of the job")

// ErrNotInHandler means an engine helper (CompleteTx, Effect) was called with a context that
// does not belong to a running handler of this engine.
var ErrNotInHandler = errors.New("tenure: not called from a running handler")

// ErrInvalidOutput means SetOutput was given a value that is not kept: it does not encode to
// JSON, or it is larger than MaxOutputBytes encoded. The output recorded before (if any) stays.
var ErrInvalidOutput = errors.New("tenure: invalid job output")

// ErrInvalidConfig means the worker configuration cannot work. The error names the field.
var ErrInvalidConfig = errors.New("tenure: invalid worker config")

// ErrDefaultsConflict means Register was given HandlerOptions whose Queue, Priority,
// MaxAttempts, Lease or Timeout differ from what the args type declares
// (generics.ArgsWithDefaults): a kind's defaults have one source. The error also matches
// ErrInvalidConfig and names the fields.
var ErrDefaultsConflict = errors.New("tenure: handler options conflict with the kind's declared defaults")

// ErrHandlersStillRunning is returned by Stop when handlers that ignore their context were
// still running when the stop deadline passed. Their jobs were released (fenced), so their late
// finishes are rejected.
var ErrHandlersStillRunning = errors.New("tenure: handlers still running after stop")

// ErrFinishAbandoned means the engine gave up writing an attempt's finish: Stop's deadline
// came first, the database stayed unreachable until the job's lease ran out, or it refused the
// write for a reason a retry cannot fix. The job stays running until its lease expires; the
// reclaim sweep then retries it (LEASE_EXPIRED). Reported through Outcome.Err and Stop.
var ErrFinishAbandoned = errors.New("tenure: finish abandoned")

// ErrSchemaBehind is returned by Start when the database's Tenure schema lacks migrations this
// release needs (or was never migrated). Apply them first: `tenure migrate up`, or
// migrations.Up(ctx, pool) (package github.com/tenureq/tenure/db/migrations) at startup.
var ErrSchemaBehind = errors.New("tenure: database schema is behind this release")

// ErrSchemaAhead is returned by Start when the database has migrations applied that this
// release does not know: a newer release migrated it. Old code is not run on a newer schema.
// It is migrations.ErrSchemaTooNew (one sentinel for the idea; migrations.Up and Down refuse
// such a database with it too): either name matches with errors.Is.
var ErrSchemaAhead = migrations.ErrSchemaTooNew

// ErrAlreadyStarted / ErrNotStarted guard the worker's lifecycle.
var (
	ErrAlreadyStarted = errors.New("tenure: worker already started")
	ErrNotStarted     = errors.New("tenure: worker not started")
)

// JobError carries a handler's classification of its failure. Build one with Permanent,
// RetryAfter or WithCode; the engine unwraps it with errors.As.
type JobError struct {
	Code ErrorCode
	// Delay, when > 0, replaces the retry policy's delay for this retry.
	Delay time.Duration
	Err   error
}

func (e *JobError) Error() string {
	if e.Err == nil {
		return string(e.Code)
	}
	return fmt.Sprintf("%s: %v", e.Code, e.Err)
}
func (e *JobError) Unwrap() error { return e.Err }

// Permanent marks err as permanent: the job goes dead at once (code PERMANENT).
func Permanent(err error) error { return &JobError{Code: CodePermanent, Err: err} }

// RetryAfter asks for the next attempt after d instead of the retry policy's delay (code
// RATE_LIMIT unless err already carries a code).
func RetryAfter(err error, d time.Duration) error {
	var je *JobError
	if errors.As(err, &je) {
		return &JobError{Code: je.Code, Delay: d, Err: err}
	}
	return &JobError{Code: CodeRateLimit, Delay: d, Err: err}
}

// SnoozeError is what Snooze returns: the handler asks to run again after Delay without
// consuming an attempt.
type SnoozeError struct {
	Delay time.Duration
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("tenure: snooze %v", e.Delay) }

// Snooze, returned by a handler, puts the job back to ready, due again after d (on the
// database clock; d < 0 counts as 0), without consuming an attempt: the attempt counter goes
// back down and the job's snooze counter goes up. The write is fenced like every finish.
// A job may snooze HandlerOptions.MaxSnoozes times; a snooze past that fails the attempt
// with code SNOOZE_LIMIT, as an error would. A pending operator cancel wins: the job ends
// cancelled. Output recorded with SetOutput is not kept.
func Snooze(d time.Duration) error { return &SnoozeError{Delay: max(d, 0)} }

// WithCode classifies err with code; the code's class decides retry or dead.
func WithCode(code ErrorCode, err error) error { return &JobError{Code: code, Err: err} }

// StaleWriteError is a finish the database rejected because the worker no longer owned the
// job. It wraps ErrLostOwnership.
type StaleWriteError struct {
	JobID      int64
	Generation int64
	Transition string // an Outcome* name ("succeeded", "retried", ...), or "effect <name>", "heartbeat"
}

func (e *StaleWriteError) Error() string {
	return fmt.Sprintf("%v: job %d generation %d: %s rejected", ErrLostOwnership, e.JobID, e.Generation, e.Transition)
}
func (e *StaleWriteError) Unwrap() error { return ErrLostOwnership }

// classify maps a handler's result to a code and an optional explicit delay.
func classify(ctx context.Context, err error) (ErrorCode, time.Duration) {
	var je *JobError
	if errors.As(err, &je) && je.Code.Valid() {
		return je.Code, je.Delay
	}
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrHandlerTimeout) || errors.Is(err, ErrHandlerTimeout):
		return CodeTimeout, 0
	case errors.Is(cause, ErrLeaseLost):
		return CodeLeaseExpired, 0
	}
	return CodeHandlerError, 0
}

// verdict is the classification of a handler's error the engine asks for (engine.ClassifyError):
// a snooze, or classify's code and delay.
func verdict(ctx context.Context, err error) engine.Verdict {
	var snooze *SnoozeError
	if errors.As(err, &snooze) {
		return engine.Verdict{Snooze: true, SnoozeDelay: snooze.Delay}
	}
	code, delay := classify(ctx, err)
	return engine.Verdict{Code: engine.ErrorCode(code), Delay: delay}
}

// The engine produces this package's errors (handler context causes, Stop's and the finishes'
// results, stale writes) and classifies handler errors with its error types: it is given them
// once, here.
func init() {
	engine.ErrLeaseLost, engine.ErrJobCancelled, engine.ErrWorkerStopping = ErrLeaseLost, ErrJobCancelled, ErrWorkerStopping
	engine.ErrHandlerTimeout, engine.ErrLostOwnership, engine.ErrNotInHandler = ErrHandlerTimeout, ErrLostOwnership, ErrNotInHandler
	engine.ErrInvalidConfig, engine.ErrHandlersStillRunning, engine.ErrFinishAbandoned = ErrInvalidConfig, ErrHandlersStillRunning, ErrFinishAbandoned
	engine.ErrAlreadyStarted, engine.ErrNotStarted, engine.ErrInvalidSchedule = ErrAlreadyStarted, ErrNotStarted, ErrInvalidSchedule
	engine.NewStaleWriteError = func(jobID, generation int64, transition string) error {
		return &StaleWriteError{JobID: jobID, Generation: generation, Transition: transition}
	}
	engine.ClassifyError = verdict
	engine.DefaultRetry = func(attempt int, code engine.ErrorCode) time.Duration {
		return FullJitter{}.Delay(attempt, ErrorCode(code))
	}
}

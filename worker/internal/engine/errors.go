package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrorCode is a failure's code (worker.ErrorCode: the public type documents the vocabulary).
type ErrorCode string

// The codes the engine decides itself; the others come from a handler's error
// (ClassifyError). The values are worker's Code* constants (a test checks they are equal).
const (
	CodeHandlerError     ErrorCode = "HANDLER_ERROR"
	CodeTimeout          ErrorCode = "TIMEOUT"
	CodeRateLimit        ErrorCode = "RATE_LIMIT"
	CodeRemoteError      ErrorCode = "TRANSIENT_REMOTE_ERROR"
	CodeLeaseExpired     ErrorCode = "LEASE_EXPIRED"
	CodePanic            ErrorCode = "PANIC"
	CodeUnknownKind      ErrorCode = "UNKNOWN_KIND"
	CodeInvalidPayload   ErrorCode = "INVALID_PAYLOAD"
	CodePermanentRemote  ErrorCode = "PERMANENT_REMOTE_ERROR"
	CodePermanent        ErrorCode = "PERMANENT"
	CodeCancelled        ErrorCode = "CANCELLED"
	CodeSnoozeLimit      ErrorCode = "SNOOZE_LIMIT"
	CodeDependencyFailed ErrorCode = "DEPENDENCY_FAILED"
)

// Permanent reports whether a failure with this code goes straight to dead
// (worker.ErrorCode.Permanent).
func (c ErrorCode) Permanent() bool {
	switch c {
	case CodeInvalidPayload, CodePermanentRemote, CodePermanent:
		return true
	}
	return false
}

// Valid reports whether c is one of the codes above (worker.ErrorCode.Valid).
func (c ErrorCode) Valid() bool {
	switch c {
	case CodeHandlerError, CodeTimeout, CodeRateLimit, CodeRemoteError, CodeLeaseExpired, CodePanic,
		CodeUnknownKind, CodeInvalidPayload, CodePermanentRemote, CodePermanent, CodeCancelled, CodeSnoozeLimit,
		CodeDependencyFailed:
		return true
	}
	return false
}

// The errors the engine returns, and the causes it gives handler contexts, are package
// worker's public sentinels (documented there): worker's init sets each of these to its own
// value, so that an application's errors.Is(err, worker.ErrLeaseLost) matches what the engine
// produced. The values below only stand in for them in the engine's own tests.
var (
	ErrLeaseLost            = errors.New("tenure: lease lost")
	ErrJobCancelled         = errors.New("tenure: job cancelled by operator")
	ErrWorkerStopping       = errors.New("tenure: worker stopping")
	ErrHandlerTimeout       = errors.New("tenure: handler timeout")
	ErrLostOwnership        = errors.New("tenure: lost ownership of the job")
	ErrNotInHandler         = errors.New("tenure: not called from a running handler")
	ErrInvalidConfig        = errors.New("tenure: invalid worker config")
	ErrHandlersStillRunning = errors.New("tenure: handlers still running after stop")
	ErrFinishAbandoned      = errors.New("tenure: finish abandoned")
	ErrAlreadyStarted       = errors.New("tenure: worker already started")
	ErrNotStarted           = errors.New("tenure: worker not started")
	ErrInvalidSchedule      = errors.New("tenure: invalid periodic schedule")
)

// NewStaleWriteError returns the error of a fenced write the database rejected because the
// attempt no longer owned the job (it must match ErrLostOwnership). Package worker sets it to
// build its *worker.StaleWriteError.
var NewStaleWriteError = func(jobID, generation int64, transition string) error {
	return fmt.Errorf("%w: job %d generation %d: %s rejected", ErrLostOwnership, jobID, generation, transition)
}

// Verdict is what a handler's error asks for: a snooze (Snooze, SnoozeDelay), or a failure
// with a code and an optional explicit delay.
type Verdict struct {
	Snooze      bool
	SnoozeDelay time.Duration
	Code        ErrorCode
	Delay       time.Duration
}

// ClassifyError reads a handler's error (err != nil, not a cancel or stop: execute.go's
// outcome decides those first) in the context it ran in. It is the one classification of a
// handler's error, package worker's (its error types: JobError, SnoozeError; the context's
// cause: timeout, lost lease), which sets it at init; the stand-in below knows only the
// causes.
var ClassifyError = func(ctx context.Context, err error) Verdict {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, ErrHandlerTimeout) || errors.Is(err, ErrHandlerTimeout):
		return Verdict{Code: CodeTimeout}
	case errors.Is(cause, ErrLeaseLost):
		return Verdict{Code: CodeLeaseExpired}
	}
	return Verdict{Code: CodeHandlerError}
}

// DefaultRetry is the retry delay of a kind without a handler here (worker.FullJitter{}; set
// by package worker at init; the stand-in is the same full jitter, 1 s doubling to 1 h).
var DefaultRetry = func(attempt int, _ ErrorCode) time.Duration {
	b := time.Hour
	if attempt >= 0 && attempt < 62 {
		if s := time.Second << uint(attempt); s > 0 && s < b && s>>uint(attempt) == time.Second {
			b = s
		}
	}
	return time.Duration(rand.Float64() * float64(b))
}

package jobs

import (
	"errors"
	"fmt"

	"github.com/tenureq/tenure/generics"
)

// ErrNotFound means no job has the given id.
var ErrNotFound = errors.New("tenure: job not found")

// ErrAlreadyFinal means the job is already in a final state, so the operation (cancel,
// re-inject of a non-dead job, ...) does not apply. The error is a *StateError carrying the
// state found.
var ErrAlreadyFinal = errors.New("tenure: job already in a final state")

// ErrNotDead means a re-inject was asked for a job that is not dead.
var ErrNotDead = errors.New("tenure: job is not dead")

// ErrJobRunning means an operation that needs the job not to be running (Retry, Delete) was
// asked for a running job: cancel it first, or wait for it. The error is a *StateError.
var ErrJobRunning = errors.New("tenure: job is running")

// ErrJobWaiting means an operation that needs a ready, dead or cancelled job (Retry) was
// asked for a job waiting for its dependencies (a workflow task or a sequence job): it runs
// once they resolve; cancel it to drop it. The error is a *StateError.
var ErrJobWaiting = errors.New("tenure: job is waiting for its dependencies")

// ErrHasDependents means Delete was asked for an unfinished job that other jobs wait for
// (they would wait for ever): cancel it first. The error is a *StateError.
var ErrHasDependents = errors.New("tenure: other jobs wait for this job")

// ErrInvalidOptions means insert options or a query parameter are out of range. Nothing was
// written. The error is an *OptionError naming the field.
var ErrInvalidOptions = errors.New("tenure: invalid options")

// ErrUnknownKind means the client has a registry and the kind is not registered in it.
// Nothing was written. It is generics.ErrUnknownKind (one sentinel for the idea): either name
// matches with errors.Is.
var ErrUnknownKind = generics.ErrUnknownKind

// ErrUnknownQueue means the client was configured with its known queues (Config.Queues) and
// an insert named another one. Nothing was written.
var ErrUnknownQueue = errors.New("tenure: queue not served (not in jobs.Config.Queues)")

// ErrMissingActor means an operator action was asked without an actor or a reason, or with one
// the audit trail cannot hold (an actor over generics.MaxNameChars or a reason over
// generics.MaxReasonChars characters, invalid UTF-8, a NUL character); the audit trail requires both.
var ErrMissingActor = errors.New("tenure: operator actions need an actor and a reason")

// ErrCorruptRow means a stored job row holds a value this package cannot decode (its error
// history is not a JSON array of AttemptError, e.g. after a manual edit or with a newer
// release's format). Reads (Get, List, ...) return it, naming the job and the column, rather
// than a JobRow with the history silently dropped. Test for it with errors.Is.
var ErrCorruptRow = errors.New("tenure: stored job row cannot be decoded")

// StateError reports the state a job was found in when an operation did not apply.
type StateError struct {
	ID    int64
	State generics.JobState
	Err   error // ErrAlreadyFinal, ErrNotDead, ErrJobRunning, ErrJobWaiting or ErrHasDependents
}

func (e *StateError) Error() string { return fmt.Sprintf("%v: job %d is %s", e.Err, e.ID, e.State) }
func (e *StateError) Unwrap() error { return e.Err }

// OptionError names the option that was rejected.
type OptionError struct {
	Field string
	Msg   string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%v: %s: %s", ErrInvalidOptions, e.Field, e.Msg)
}
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

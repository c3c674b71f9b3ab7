package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker/internal/engine"
)

// This file is the handler's side of workflows (jobs.Workflow): reading what the tasks this
// one waited for recorded. The engine itself has no workflow code: a dependent is released in
// the transaction of its last dependency's fenced finish by the database (the trigger
// jobs_settle_dependents, migration 0020), whichever statement made that finish.

// ErrNotADependency means DependencyOutput was asked for a task name that is not one of the
// running job's dependencies (not in its workflow, or not one it waits for).
var ErrNotADependency = errors.New("tenure: no such dependency of this job")

// ErrDependencyFailed means the named dependency did not succeed (it ended dead or cancelled,
// and this task runs anyway: jobs.RunDependents), so it has no output to read. The error is a
// *DependencyError carrying the state.
var ErrDependencyFailed = errors.New("tenure: dependency did not succeed")

// ErrNoOutput means the named dependency succeeded without recording an output (SetOutput).
var ErrNoOutput = errors.New("tenure: dependency recorded no output")

// DependencyError reports the dependency a read was about.
type DependencyError struct {
	Task  string
	JobID int64
	State generics.JobState
	Err   error // ErrDependencyFailed, ErrNoOutput, or the decoding error
}

func (e *DependencyError) Error() string {
	return fmt.Sprintf("tenure: dependency %q (job %d, %s): %v", e.Task, e.JobID, e.State, e.Err)
}

func (e *DependencyError) Unwrap() error { return e.Err }

// DependencyOutput decodes the output (worker.SetOutput) of task, one of the dependencies of
// the running workflow task, into a T. A fan-in task reads each of its dependencies this way.
// The output was written by the dependency's fenced success, so it is the successful
// attempt's and no other's. It returns ErrNotInHandler outside a running handler,
// ErrNotADependency for a name that is not one of this task's dependencies, and a
// *DependencyError wrapping ErrDependencyFailed (a dependency that ended dead or cancelled
// while this task runs anyway), ErrNoOutput, or the JSON decoding error.
func DependencyOutput[T any](ctx context.Context, task string) (T, error) {
	var zero T
	e := engine.ExecutionFrom(ctx)
	if e == nil {
		return zero, ErrNotInHandler
	}
	en, id := e.Engine(), e.Job().ID
	row, err := en.Queries(en.Pool()).DependencyOutput(ctx, gen.DependencyOutputParams{TaskName: task, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("%w: %q (job %d)", ErrNotADependency, task, id)
	}
	if err != nil {
		return zero, err
	}
	st := generics.JobState(row.State)
	if st != generics.JobStateSucceeded {
		return zero, &DependencyError{Task: task, JobID: row.ID, State: st, Err: ErrDependencyFailed}
	}
	if len(row.Output) == 0 {
		return zero, &DependencyError{Task: task, JobID: row.ID, State: st, Err: ErrNoOutput}
	}
	var v T
	if err := json.Unmarshal(row.Output, &v); err != nil {
		return zero, &DependencyError{Task: task, JobID: row.ID, State: st, Err: err}
	}
	return v, nil
}

package tenuretest

import (
	"context"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// WorkflowRun is what RunWorkflow saw.
type WorkflowRun struct {
	// Tasks are the workflow's tasks as stored at the end, by task name: each in a final
	// state (succeeded, dead, cancelled), with its output (worker.SetOutput) after a success.
	Tasks map[string]*generics.JobRow
	// Started are the names of the tasks that ran, in the order their last attempt was
	// claimed (on the database clock): a task appears after every dependency it waited for.
	Started []string
}

// RunWorkflow inserts wf and runs its tasks through real claims: w is a worker built on
// pool (not started) with a handler for each kind of wf's tasks, and its queues; RunWorkflow
// inserts wf with a client of w's schema, starts w, waits until every task of wf is in a final
// state, stops w and returns the tasks. Releases happen as in production (in the finish of each
// task's last dependency), so the test sees what became ready when. The test fails if wf is
// refused, or a task is still not final after timeout (default 30s).
func RunWorkflow(ctx context.Context, t T, pool *pgxpool.Pool, w *worker.Worker, wf *jobs.Workflow, timeout time.Duration) WorkflowRun {
	t.Helper()
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), Schema: w.Schema()})
	if err != nil {
		t.Fatalf("tenuretest: RunWorkflow: %v", err)
		return WorkflowRun{}
	}
	if _, err := client.InsertWorkflow(ctx, wf); err != nil {
		t.Fatalf("tenuretest: RunWorkflow: insert: %v", err)
		return WorkflowRun{}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("tenuretest: RunWorkflow: %v", err)
		return WorkflowRun{}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Errorf("tenuretest: RunWorkflow: stopping the worker: %v", err)
		}
	}()
	deadline := time.Now().Add(timeout)
	for {
		v, err := client.Workflow(ctx, wf.ID())
		if err != nil {
			t.Fatalf("tenuretest: RunWorkflow: %v", err)
			return WorkflowRun{}
		}
		run := WorkflowRun{Tasks: make(map[string]*generics.JobRow, len(v.Tasks))}
		final := true
		var waiting []string
		for _, r := range v.Tasks {
			run.Tasks[r.TaskName] = r
			if !r.State.Final() {
				final = false
				waiting = append(waiting, r.TaskName+" ("+string(r.State)+")")
			}
		}
		if final {
			var ran []*generics.JobRow
			for _, r := range v.Tasks {
				if r.AttemptedAt != nil {
					ran = append(ran, r)
				}
			}
			sort.SliceStable(ran, func(i, j int) bool { return ran[i].AttemptedAt.Before(*ran[j].AttemptedAt) })
			for _, r := range ran {
				run.Started = append(run.Started, r.TaskName)
			}
			return run
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenuretest: RunWorkflow: workflow %q: tasks not final after %v: %v", wf.Name(), timeout, waiting)
			return WorkflowRun{}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("tenuretest: RunWorkflow: %v", ctx.Err())
			return WorkflowRun{}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

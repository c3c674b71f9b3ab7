package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type Resize struct {
	Image string `json:"image"`
	Width int    `json:"width"`
}

func (Resize) Kind() string        { return "resize" }
func (Resize) PayloadVersion() int { return 1 }

type Publish struct {
	Image string `json:"image"`
}

func (Publish) Kind() string        { return "publish" }
func (Publish) PayloadVersion() int { return 1 }

// A fan-out and fan-in: two resizes run in parallel, publish waits for both and reads their
// outputs. The whole workflow is inserted in the caller's transaction; publish is released in
// the transaction of the second resize's fenced success.
func ExampleNewWorkflow() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)

	wf := jobs.NewWorkflow("photo-17", nil).
		Add("small", Resize{Image: "17.jpg", Width: 320}, nil).
		Add("large", Resize{Image: "17.jpg", Width: 1280}, nil).
		Add("publish", Publish{Image: "17.jpg"}, &jobs.TaskOpts{DependsOn: []string{"small", "large"}})
	tx, _ := pool.Begin(ctx)
	res, err := client.InsertWorkflowTx(ctx, tx, wf) // with the business write that asked for it
	if err != nil {
		panic(err)
	}
	_ = tx.Commit(ctx)
	fmt.Println(res.Tasks["small"].State, res.Tasks["publish"].State, res.Tasks["publish"].DepsPending)

	done := make(chan string, 1)
	w, _ := worker.New(pool, &worker.Config{FetchPollMax: 100 * time.Millisecond})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Resize]) error {
		return worker.SetOutput(ctx, fmt.Sprintf("%s@%d", job.Args.Image, job.Args.Width))
	}, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Publish]) error {
		small, err := worker.DependencyOutput[string](ctx, "small")
		if err != nil {
			return err
		}
		large, err := worker.DependencyOutput[string](ctx, "large")
		if err != nil {
			return err
		}
		done <- small + " " + large
		return nil
	}, nil)
	_ = w.Start(ctx)
	defer func() { _ = w.Stop(ctx) }()
	fmt.Println(<-done)

	// Refused at build time: a cycle, with the tasks around it.
	bad := jobs.NewWorkflow("loop", nil).
		Add("a", Publish{}, &jobs.TaskOpts{DependsOn: []string{"b"}}).
		Add("b", Publish{}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	err = bad.Validate()
	var we *jobs.WorkflowError
	fmt.Println(errors.Is(err, jobs.ErrWorkflowCycle), errors.As(err, &we) && len(we.Cycle) == 3)
	// Output:
	// ready waiting 2
	// 17.jpg@320 17.jpg@1280
	// true true
}

// Jobs of one sequence key run one at a time, in insertion order; each waits for the one
// before it.
func ExampleInsertOpts_sequence() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)
	for i := 1; i <= 3; i++ {
		res, _ := client.Insert(ctx, Report{AccountID: 42}, &jobs.InsertOpts{Sequence: "account:42"})
		fmt.Println(res.Job.State, res.Job.SequenceKey)
	}
	// Output:
	// ready account:42
	// waiting account:42
	// waiting account:42
}

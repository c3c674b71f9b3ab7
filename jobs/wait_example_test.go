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

type Square struct {
	N int `json:"n"`
}

func (Square) Kind() string        { return "square" }
func (Square) PayloadVersion() int { return 1 }

type SquareResult struct {
	Value int `json:"value"`
}

// InsertAndWait enqueues a job and returns the output its handler recorded (worker.SetOutput)
// once a worker, in this process or any other, finished it; Progress is what the handler
// reported on the way.
func ExampleInsertAndWait() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	w, _ := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Concurrency: 4}}})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[Square]) error {
		if job.Args.N < 0 {
			return worker.Permanent(errors.New("negative"))
		}
		_ = worker.Progress(ctx, 1, 1, "squared")
		return worker.SetOutput(ctx, SquareResult{Value: job.Args.N * job.Args.N})
	}, nil)
	_ = w.Start(ctx)
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	client, _ := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	row, out, err := jobs.InsertAndWait[SquareResult](wctx, client, Square{N: 12}, nil)
	fmt.Println(row.State, out.Value, err, row.Progress.Msg)

	_, _, err = jobs.InsertAndWait[SquareResult](wctx, client, Square{N: -1}, nil)
	var ns *jobs.NotSucceededError
	fmt.Println(errors.As(err, &ns), ns.State, ns.Code)

	_, err = client.Wait(wctx, 999999)
	fmt.Println(errors.Is(err, jobs.ErrNotFound))
	// Output:
	// succeeded 144 <nil> squared
	// true dead PERMANENT
	// true
}

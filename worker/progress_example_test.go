package worker_test

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

type ImportRows struct {
	Rows int64 `json:"rows"`
}

func (ImportRows) Kind() string        { return "import_rows" }
func (ImportRows) PayloadVersion() int { return 1 }

// Progress records how far a long handler got; readers (jobs.Client.Get, the dashboard,
// `tenure jobs get`) see it while the job runs, and the finished job keeps the last value.
func ExampleProgress() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	w, _ := worker.New(pool, &worker.Config{FetchPollMin: 10 * time.Millisecond, FetchPollMax: 50 * time.Millisecond})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[ImportRows]) error {
		for i := int64(1); i <= job.Args.Rows; i++ {
			// ... import row i ...
			if err := worker.Progress(ctx, i, job.Args.Rows, "importing"); err != nil {
				return err
			}
		}
		return nil
	}, nil)
	client, _ := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	_ = w.Start(ctx)
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	res, _ := client.Insert(ctx, ImportRows{Rows: 500}, nil)
	row, _ := client.Wait(ctx, res.Job.ID)
	fmt.Println(row.State, row.Progress.Done, "of", row.Progress.Total, row.Progress.Msg)

	fmt.Println(errors.Is(worker.Progress(ctx, 1, 2, ""), worker.ErrNotInHandler))
	// Output:
	// succeeded 500 of 500 importing
	// true
}

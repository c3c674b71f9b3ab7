package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

type Report struct {
	AccountID int64 `json:"account_id"`
}

func (Report) Kind() string        { return "report" }
func (Report) PayloadVersion() int { return 1 }

// Enqueue one job, one inside a transaction, and many in one round trip; bad input is a
// typed error and writes nothing.
func ExampleClient_Insert() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)

	row, _ := client.Insert(ctx, Report{AccountID: 1}, &jobs.InsertOpts{
		Queue: "reports", Priority: jobs.PriorityLow, Delay: time.Minute, MaxAttempts: 5, Lease: 2 * time.Minute,
	})
	fmt.Println(row.State, row.Queue, row.Priority, row.MaxAttempts, row.Lease)

	tx, _ := pool.Begin(ctx)
	_, _ = client.InsertTx(ctx, tx, Report{AccountID: 2}, nil)
	_ = tx.Rollback(ctx) // the job never existed

	ids, _ := client.InsertMany(ctx, []jobs.InsertManyParams{{Args: Report{AccountID: 3}}, {Args: Report{AccountID: 4}}})
	fmt.Println(len(ids), "jobs in one round trip")

	_, err := client.Insert(ctx, Report{AccountID: 5}, &jobs.InsertOpts{Priority: 12})
	fmt.Println(errors.Is(err, jobs.ErrInvalidOptions))
	big := make([]byte, 70<<10)
	_, err = client.Insert(ctx, blobArgs{Data: string(big)}, nil)
	fmt.Println(errors.Is(err, generics.ErrPayloadTooLarge))

	page, _ := client.List(ctx, jobs.ListParams{Kind: "report"})
	fmt.Println(len(page.Jobs), "report jobs stored")
	// Output:
	// ready reports 1 5 2m0s
	// 2 jobs in one round trip
	// true
	// true
	// 3 report jobs stored
}

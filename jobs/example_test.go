package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
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

	res, _ := client.Insert(ctx, Report{AccountID: 1}, &jobs.InsertOpts{
		Queue: "reports", Priority: jobs.PriorityLow, Delay: time.Minute, MaxAttempts: 5, Lease: 2 * time.Minute,
	})
	row := res.Job // the stored row
	fmt.Println(row.State, row.Queue, row.Priority, row.MaxAttempts, row.Lease, res.Duplicate)

	tx, _ := pool.Begin(ctx)
	_, _ = client.InsertTx(ctx, tx, Report{AccountID: 2}, nil)
	_ = tx.Rollback(ctx) // the job never existed

	many, _ := client.InsertMany(ctx, []jobs.InsertManyParams{{Args: Report{AccountID: 3}}, {Args: Report{AccountID: 4}}})
	fmt.Println(len(many), "jobs in one round trip, ids in input order:", many[0].Job.ID < many[1].Job.ID)

	_, err := client.Insert(ctx, Report{AccountID: 5}, &jobs.InsertOpts{Priority: 12})
	fmt.Println(errors.Is(err, jobs.ErrInvalidOptions))
	big := strings.Repeat("x", 70<<10)
	_, err = client.Insert(ctx, blobArgs{Data: big}, nil)
	fmt.Println(errors.Is(err, generics.ErrPayloadTooLarge))

	page, _ := client.List(ctx, jobs.ListParams{Kind: "report"})
	fmt.Println(len(page.Jobs), "report jobs stored")
	// Output:
	// ready reports 1 5 2m0s false
	// 2 jobs in one round trip, ids in input order: true
	// true
	// true
	// 3 report jobs stored
}

// Workers lists the worker registry: every running worker refreshes its row every few
// seconds (worker.Config.RegistryEvery) and deletes it when it stops gracefully; an Expired
// row belongs to a worker that stopped without deregistering.
func ExampleClient_Workers() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)

	w, _ := worker.New(pool, &worker.Config{ID: "billing-1", Queues: map[string]worker.QueueConfig{"billing": {Concurrency: 8}}})
	_ = w.Start(ctx) // registers at once
	for ws, _ := client.Workers(ctx); len(ws) == 0; ws, _ = client.Workers(ctx) {
		time.Sleep(10 * time.Millisecond)
	}
	ws, _ := client.Workers(ctx)
	for _, w := range ws {
		fmt.Println(w.ID, w.Queues, "expired:", w.Expired, "heartbeat under 5s:", w.HeartbeatAge < 5*time.Second)
	}

	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = w.Stop(stopCtx)
	ws, _ = client.Workers(ctx)
	fmt.Println(len(ws), "registered after a graceful stop")
	// Output:
	// billing-1 map[billing:{8 false}] expired: false heartbeat under 5s: true
	// 0 registered after a graceful stop
}

// A unique job: checkout may enqueue the receipt of an order many times (retries, double
// clicks); while one is queued, running, or (with generics.JobStateSucceeded) done, the others return it.
func ExampleUniqueOpts() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)

	once := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"account_id"}, States: []generics.JobState{generics.JobStateSucceeded}}}
	first, _ := client.Insert(ctx, Report{AccountID: 7}, once)
	again, _ := client.Insert(ctx, Report{AccountID: 7}, once)
	other, _ := client.Insert(ctx, Report{AccountID: 8}, once)
	fmt.Println(first.Duplicate, again.Duplicate, again.Job.ID == first.Job.ID, other.Duplicate)

	res, _ := client.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: Report{AccountID: 7}, Opts: once}, // held by first
		{Args: Report{AccountID: 9}, Opts: once}, // new
		{Args: Report{AccountID: 9}, Opts: once}, // the row before holds it
	})
	fmt.Println(res[0].Duplicate, res[1].Duplicate, res[2].Duplicate, res[2].Job.ID == res[1].Job.ID)
	// Output:
	// false true true false
	// true false true true
}

// Tags label jobs for search; List returns the jobs carrying every tag asked for.
func ExampleListParams_tags() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)
	_, _ = client.Insert(ctx, Report{AccountID: 1}, &jobs.InsertOpts{Tags: []string{"tenant:acme", "monthly"}})
	_, _ = client.Insert(ctx, Report{AccountID: 2}, &jobs.InsertOpts{Tags: []string{"tenant:acme"}})
	page, _ := client.List(ctx, jobs.ListParams{Tags: []string{"tenant:acme", "monthly"}})
	fmt.Println(len(page.Jobs), page.Jobs[0].Tags)
	// Output:
	// 1 [tenant:acme monthly]
}

// SQLTx enqueues in a database/sql transaction (sqlx, GORM, ent and bun hand out one) of a DB
// opened with pgx's stdlib driver: the job commits or rolls back with the application's writes.
func ExampleSQLTx() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)
	db, _ := sql.Open("pgx", pool.Config().ConnString()) // import _ "github.com/jackc/pgx/v5/stdlib"
	defer db.Close()

	tx, _ := db.BeginTx(ctx, nil)
	res, _ := client.InsertTx(ctx, jobs.SQLTx(tx), Report{AccountID: 1}, nil)
	_ = tx.Commit()
	got, _ := client.Get(ctx, res.Job.ID)
	fmt.Println(got.Kind, got.State)

	tx, _ = db.BeginTx(ctx, nil)
	many, _ := client.InsertManyTx(ctx, jobs.SQLTx(tx), []jobs.InsertManyParams{{Args: Report{AccountID: 2}}})
	_ = tx.Rollback() // the job never existed
	_, err := client.Get(ctx, many[0].Job.ID)
	fmt.Println(errors.Is(err, jobs.ErrNotFound))
	// Output:
	// report ready
	// true
}

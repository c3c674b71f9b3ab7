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

// Notify is a job args type handled in batches.
type Notify struct {
	UserID int64  `json:"user_id"`
	Text   string `json:"text"`
}

func (Notify) Kind() string        { return "notify" }
func (Notify) PayloadVersion() int { return 1 }

// sendAll stands for a bulk API that takes many messages in one request and reports a result
// per message.
func sendAll(_ context.Context, msgs []Notify) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		if m.UserID == 0 {
			errs[i] = worker.Permanent(errors.New("no such user"))
		}
	}
	return errs
}

// A batch handler: up to MaxSize jobs of the kind per call, one result per job. Each job
// still finishes on its own (fenced by its claim token): the failed one goes dead, the others
// succeed; SetOutput takes the job's own context (JobContext).
func ExampleRegisterBatch() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()

	finished := make(chan worker.Outcome, 3)
	w, err := worker.New(pool, &worker.Config{
		// Each job of a batch holds one handler slot: Concurrency at least MaxSize.
		Queues:    map[string]worker.QueueConfig{"default": {Concurrency: 100}},
		OnOutcome: func(o worker.Outcome) { finished <- o },
	})
	if err != nil {
		panic(err)
	}
	calls := make(chan int, 3)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[Notify]) ([]error, error) {
		calls <- len(batch)
		msgs := make([]Notify, len(batch))
		for i, j := range batch {
			msgs[i] = j.Args
		}
		results := sendAll(ctx, msgs)
		for i, j := range batch {
			if results[i] == nil {
				_ = worker.SetOutput(worker.JobContext(ctx, j.JobRow), "sent")
			}
		}
		return results, nil // nil, err would fail the whole batch
	}, &worker.BatchOptions{MaxSize: 100, MaxWait: 200 * time.Millisecond})

	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		panic(err)
	}
	if _, err := client.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: Notify{UserID: 1, Text: "hello"}}, {Args: Notify{UserID: 2, Text: "hello"}}, {Args: Notify{UserID: 0, Text: "hello"}},
	}); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	byState := map[string]int{}
	for range 3 {
		byState[(<-finished).Transition]++
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		panic(err)
	}
	fmt.Println("first call:", <-calls, "jobs")
	fmt.Println("succeeded:", byState[worker.OutcomeSucceeded], "dead:", byState[worker.OutcomeDead])
	// Output:
	// first call: 3 jobs
	// succeeded: 2 dead: 1
}

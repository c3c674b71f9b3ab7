package worker_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// SendReceipt is a job args type: a plain struct with a kind and a payload version.
type SendReceipt struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

func (SendReceipt) Kind() string        { return "send_receipt" }
func (SendReceipt) PayloadVersion() int { return 1 }

// The quickstart: register a typed handler, enqueue in the same transaction as a business
// write, run the worker until SIGINT or SIGTERM, then stop it gracefully.
func Example() {
	pool, cleanup := pgtest.ExamplePool() // your *pgxpool.Pool; the schema is migrated (migrations.Up)
	defer cleanup()
	go interruptWhenSucceeded(pool) // this example's Ctrl-C, once the job is done

	// quickstart:begin
	// Ctrl-C or SIGTERM cancels ctx: the worker stops claiming, running handlers may finish.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	w, err := worker.New(pool, &worker.Config{
		Queues:          map[string]worker.QueueConfig{"default": {Concurrency: 10}},
		ShutdownTimeout: 30 * time.Second, // the default
	})
	if err != nil {
		panic(err)
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[SendReceipt]) error {
		fmt.Printf("receipt for order %d to %s (attempt %d)\n", job.Args.OrderID, job.Args.Email, job.Attempt)
		return nil
	}, &worker.HandlerOptions{Timeout: 30 * time.Second, MaxAttempts: 10})

	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		panic(err)
	}

	// The order and its job commit or roll back together.
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := tx.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL)"); err != nil {
		panic(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders (id, email) VALUES (42, 'ada@example.com')"); err != nil {
		panic(err)
	}
	if _, err := client.InsertTx(ctx, tx, SendReceipt{OrderID: 42, Email: "ada@example.com"}, nil); err != nil {
		panic(err)
	}
	if err := tx.Commit(ctx); err != nil {
		panic(err)
	}

	// Start fails on a database it cannot use (unreachable, schema not migrated).
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	<-ctx.Done() // the graceful stop has begun
	// Wait for it; by this deadline handlers still running are cancelled and their jobs released.
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		panic(err)
	}
	// quickstart:end
	fmt.Println("succeeded:", w.Stats().Succeeded)
	// Output:
	// receipt for order 42 to ada@example.com (attempt 1)
	// succeeded: 1
}

// interruptWhenSucceeded sends this process SIGINT once a job has succeeded: the Example's
// stand-in for an operator's Ctrl-C.
func interruptWhenSucceeded(pool *pgxpool.Pool) {
	for {
		var n int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE state = 'succeeded'").Scan(&n); err != nil {
			return
		}
		if n > 0 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type ChargeCard struct {
	OrderID int64 `json:"order_id"`
	Cents   int64 `json:"cents"`
}

func (ChargeCard) Kind() string        { return "charge_card" }
func (ChargeCard) PayloadVersion() int { return 1 }

// Effect runs an external call at most once per job: the first attempt records the result
// under the stable key job:{id}:effect:{name}; a retry replays it instead of charging again.
func ExampleEffect() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	w, _ := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Concurrency: 1}}})
	charges := 0 // the remote payment service's count
	done := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[ChargeCard]) error {
		res, err := worker.Effect(ctx, job, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
			charges++ // a real call sends call.Key as its Idempotency-Key
			return fmt.Sprintf("ch_%d", job.Args.OrderID), nil
		})
		if err != nil {
			return err
		}
		fmt.Printf("attempt %d: charge %s (replayed=%v)\n", job.Attempt, res.Value, res.Replayed)
		if job.Attempt == 1 {
			return worker.RetryAfter(fmt.Errorf("receipt mailer down"), time.Millisecond) // fail after the effect
		}
		close(done)
		return nil
	}, nil)
	client, _ := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	row, _ := client.Insert(ctx, ChargeCard{OrderID: 7, Cents: 1999}, nil)
	_ = w.Start(ctx)
	<-done
	_ = w.Stop(ctx)
	fmt.Println("key:", generics.EffectKey(row.ID, "charge") == fmt.Sprintf("job:%d:effect:charge", row.ID))
	fmt.Println("remote charges:", charges)
	// Output:
	// attempt 1: charge ch_7 (replayed=false)
	// attempt 2: charge ch_7 (replayed=true)
	// key: true
	// remote charges: 1
}

// Cancelling a running job reaches its handler's context at once (through NOTIFY, at the
// latest on its next heartbeat); the job ends cancelled.
func ExampleWorker_cancel() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	w, _ := worker.New(pool, nil)
	started := make(chan struct{})
	stopped := make(chan error, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[SendReceipt]) error {
		close(started)
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}, nil)
	client, _ := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	row, _ := client.Insert(ctx, SendReceipt{OrderID: 1, Email: "x@example.com"}, nil)
	_ = w.Start(ctx)
	<-started
	outcome, err := client.Cancel(ctx, row.ID, jobs.Action{Actor: "ops@example.com", Reason: "order refunded"})
	fmt.Println(outcome, err)
	fmt.Println("handler stopped:", <-stopped)
	for {
		got, _ := client.Get(ctx, row.ID)
		if got.State.Final() {
			fmt.Println("state:", got.State, got.LastErrorCode)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	// Output:
	// cancel_requested <nil>
	// handler stopped: tenure: job cancelled by operator
	// state: cancelled CANCELLED
}

// A handler that waits for something without spending its attempts snoozes; one that has a
// result to keep records it with SetOutput (written by the fenced completion).
func ExampleSnooze() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	w, _ := worker.New(pool, &worker.Config{FetchPollMin: 10 * time.Millisecond, FetchPollMax: 50 * time.Millisecond})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[SendReceipt]) error {
		if job.Snoozes < 2 { // e.g. the invoice PDF is not rendered yet
			return worker.Snooze(10 * time.Millisecond)
		}
		return worker.SetOutput(ctx, map[string]string{"message_id": "m-1"})
	}, &worker.HandlerOptions{MaxAttempts: 1, MaxSnoozes: 10})
	client, _ := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	row, _ := client.Insert(ctx, SendReceipt{OrderID: 1, Email: "ada@example.com"}, nil)
	_ = w.Start(ctx)
	for row.State != jobs.StateSucceeded {
		time.Sleep(20 * time.Millisecond)
		row, _ = client.Get(ctx, row.ID)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = w.Stop(sctx)
	fmt.Println(row.State, "attempts", row.Attempts, "snoozes", row.Snoozes, string(row.Output))
	// Output:
	// succeeded attempts 1 snoozes 2 {"message_id": "m-1"}
}

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
		res, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
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
	fmt.Println("key:", generics.EffectKey(row.Job.ID, "charge") == fmt.Sprintf("job:%d:effect:charge", row.Job.ID))
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
	outcome, err := client.Cancel(ctx, row.Job.ID, jobs.Action{Actor: "ops@example.com", Reason: "order refunded"})
	fmt.Println(outcome, err)
	fmt.Println("handler stopped:", <-stopped)
	for {
		got, _ := client.Get(ctx, row.Job.ID)
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

// NightlyReport is the args of a periodic job: the tick it reports on.
type NightlyReport struct {
	Day time.Time `json:"day"`
}

func (NightlyReport) Kind() string        { return "nightly_report" }
func (NightlyReport) PayloadVersion() int { return 1 }

// Periodic jobs: every worker that lists a schedule takes part, and each tick is enqueued
// once between them. Here a cron schedule runs a report at 02:30 Berlin time (CatchUpOnce: if
// no worker ran then, the first one up enqueues one job for the missed nights), and a 1-second
// interval shows ticks.
func ExampleNewPeriodicJob() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	ticks := make(chan time.Time, 10)
	w, err := worker.New(pool, &worker.Config{
		Periodic: []worker.PeriodicJob{
			worker.NewPeriodicJob("nightly-report", worker.Cron("30 2 * * *", "Europe/Berlin"),
				func(ctx context.Context, t worker.Tick) (NightlyReport, error) {
					return NightlyReport{Day: t.At}, nil
				}, &worker.PeriodicOptions{CatchUp: worker.CatchUpOnce, Jitter: time.Minute}),
			worker.NewPeriodicJob("heartbeat-report", worker.Every(time.Second),
				func(ctx context.Context, t worker.Tick) (NightlyReport, error) {
					return NightlyReport{Day: t.At}, nil
				}, &worker.PeriodicOptions{Insert: &jobs.InsertOpts{Priority: jobs.PriorityLow}}),
		},
	})
	if err != nil {
		panic(err)
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[NightlyReport]) error {
		ticks <- job.Args.Day
		return nil
	}, nil)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	a, b := <-ticks, <-ticks
	_ = w.Stop(ctx)
	fmt.Println("whole seconds:", a.Equal(a.Truncate(time.Second)), "one second apart:", b.Sub(a) == time.Second)

	client, _ := jobs.NewClient(pool, nil)
	schedules, _ := client.Periodic(ctx)
	for _, s := range schedules {
		fmt.Printf("%s: %s, kind %s\n", s.Name, s.Spec, s.Kind)
	}
	// Output:
	// whole seconds: true one second apart: true
	// heartbeat-report: every 1s, kind nightly_report
	// nightly-report: cron 30 2 * * * Europe/Berlin, kind nightly_report
}

// Pausing a queue stops every worker's claims from it within about a second; running jobs
// finish. The state is a row, so it survives restarts, until ResumeQueue.
func ExampleWorker_pauseQueue() {
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	ctx := context.Background()
	client, _ := jobs.NewClient(pool, nil)
	act := jobs.Action{Actor: "ops@example.com", Reason: "mail relay maintenance"}
	out, _ := client.PauseQueue(ctx, "default", act)
	fmt.Println(out)

	w, _ := worker.New(pool, nil)
	done := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[SendReceipt]) error {
		close(done)
		return nil
	}, nil)
	_, _ = client.Insert(ctx, SendReceipt{OrderID: 1, Email: "x@example.com"}, nil)
	_ = w.Start(ctx)
	time.Sleep(500 * time.Millisecond)
	fmt.Println("paused:", w.Stats().PausedQueues, "claimed:", w.Stats().Claimed)

	out, _ = client.ResumeQueue(ctx, "default", jobs.Action{Actor: "ops@example.com", Reason: "relay is back"})
	fmt.Println(out)
	<-done
	_ = w.Stop(ctx)
	fmt.Println("claimed:", w.Stats().Claimed)
	// Output:
	// paused
	// paused: [default] claimed: 0
	// resumed
	// claimed: 1
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
	res, _ := client.Insert(ctx, SendReceipt{OrderID: 1, Email: "ada@example.com"}, nil)
	_ = w.Start(ctx)
	row := res.Job
	for row.State != generics.JobStateSucceeded {
		time.Sleep(20 * time.Millisecond)
		row, _ = client.Get(ctx, row.ID)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = w.Stop(sctx)
	fmt.Println(row.State, "attempts", row.Attempt, "snoozes", row.Snoozes, string(row.Output))
	// Output:
	// succeeded attempts 1 snoozes 2 {"message_id": "m-1"}
}

package tenurenats_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/worker"
)

type receiptArgs struct {
	OrderID int64 `json:"order_id"`
}

func (receiptArgs) Kind() string        { return "send_receipt" }
func (receiptArgs) PayloadVersion() int { return 1 }

// sendReceipt is an ordinary Tenure handler: it runs unchanged on worker.Worker.
func sendReceipt(ctx context.Context, job *generics.Job[receiptArgs]) error {
	_, err := worker.Effect(ctx, job.JobRow, "mail", func(ctx context.Context, call worker.EffectCall) (string, error) {
		return "sent", nil // call the mail provider with call.Key as its idempotency key
	})
	return err
}

// Example wires the outbox relay and a JetStream worker for one kind. (Not run: it needs
// PostgreSQL and NATS; the package's tests run the same calls against real servers.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://localhost/app")
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	// One stream for the jobs, one for their dead letters; a duplicate window the relay accepts.
	_, _ = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"tenure.jobs.>"}, Duplicates: 2 * time.Minute})
	_, _ = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "JOBS_DEAD", Subjects: []string{"tenure.jobs_dead.>"}})

	w, err := tenurenats.NewWorker(js, &tenurenats.Config{Stream: "JOBS", Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	// The same handler and options a worker.Worker would take.
	if err := tenurenats.Register(w, sendReceipt, &worker.HandlerOptions{MaxAttempts: 10, Lease: time.Minute}); err != nil {
		log.Fatal(err)
	}
	relay, err := tenurenats.NewRelay(pool, js, &tenurenats.RelayConfig{Stream: "JOBS"})
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = relay.Run(ctx) }()
	go func() { _ = w.Run(ctx) }()

	// Enqueue in the business transaction: the job exists if and only if the order commits.
	client, _ := tenurenats.NewClient(js, &tenurenats.ClientConfig{Registry: w.Registry()})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// ... INSERT INTO orders ...
		_, err := tenurenats.InsertTx(ctx, tx, client, receiptArgs{OrderID: 42}, nil)
		return err
	})
	fmt.Println(err)
}

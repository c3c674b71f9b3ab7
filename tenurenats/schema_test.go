package tenurenats_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/tenurenats"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

// TestOutboxAndStreamWorkerInAnotherSchema: in a database where Tenure lives in schema
// "nats_jobs" only (no schema "tenure"), a job enqueued with InsertTx and a raw message
// published with Publish go into that schema's outbox, a relay of that schema publishes both,
// the stream worker runs the job with its effect recorded in that schema's ledger, and
// PendingIn and PruneSentIn see that outbox. Invalid schema names are refused everywhere.
func TestOutboxAndStreamWorkerInAnotherSchema(t *testing.T) {
	const schema = "nats_jobs"
	e := newEnv(t)
	pool := tenuretest.PoolIn(t, schema)
	ctx := context.Background()

	cfg := e.config(nil)
	cfg.Pool, cfg.Schema = pool, schema
	w, err := tenurenats.NewWorker(e.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type ran struct {
		seq    int64
		result string
	}
	got := make(chan ran, 4)
	if err := tenurenats.Register(w, func(ctx context.Context, job *generics.Job[mailArgs]) error {
		r, err := worker.Effect(ctx, job.JobRow, "send", func(context.Context, worker.EffectCall) (string, error) {
			return "sent-" + job.Args.To, nil
		})
		if err != nil {
			return err
		}
		got <- ran{job.ID, r.Value}
		return nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c, err := tenurenats.NewClient(e.js, &tenurenats.ClientConfig{SubjectPrefix: e.prefix + ".jobs", Stream: e.name,
		Registry: w.Registry(), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tenurenats.InsertTx(ctx, tx, c, mailArgs{To: "schema@x"}, nil); err != nil {
			return err
		}
		_, err := tenurenats.Publish(ctx, tx, e.prefix+".events.paid", []byte("paid"), &tenurenats.PublishOpts{MsgID: "evt-1", Schema: schema})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM nats_jobs.outbox WHERE sent_at IS NULL").Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("nats_jobs.outbox pending rows %d (%v), want 2", rows, err)
	}
	if n, _, err := tenurenats.PendingIn(ctx, pool, schema); err != nil || n != 2 {
		t.Fatalf("PendingIn: %d, %v; want 2", n, err)
	}
	if _, _, err := tenurenats.Pending(ctx, pool); err == nil {
		t.Fatal("Pending (schema tenure) succeeded in a database without schema tenure")
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r, err := tenurenats.NewRelay(pool, e.js, &tenurenats.RelayConfig{Stream: e.name, PollInterval: 10 * time.Millisecond, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(rctx) }()
	var job ran
	select {
	case job = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the job enqueued through the outbox never ran")
	}
	if job.result != "sent-schema@x" {
		t.Fatalf("effect result %q", job.result)
	}
	var result string
	key := fmt.Sprintf("nats:%s:job:%d:effect:send", e.name, job.seq)
	if err := pool.QueryRow(ctx, "SELECT result #>> '{}' FROM nats_jobs.stream_effects WHERE key = $1", key).Scan(&result); err != nil || result != "sent-schema@x" {
		t.Fatalf("ledger row %s in nats_jobs.stream_effects: %q, %v", key, result, err)
	}
	waitFor(t, 10*time.Second, "both outbox rows sent", func() bool {
		n, _, err := tenurenats.PendingIn(ctx, pool, schema)
		return err == nil && n == 0
	})
	cancel()
	if err := <-relayDone; err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, m := range streamMessages(t, e.stream) {
		subjects = append(subjects, m.Subject)
	}
	if want := []string{e.prefix + ".jobs.mail", e.prefix + ".events.paid"}; fmt.Sprint(subjects) != fmt.Sprint(want) {
		t.Fatalf("stream holds %v, want %v", subjects, want)
	}
	if n, err := tenurenats.PruneSentIn(ctx, pool, schema, -time.Minute); err != nil || n != 2 {
		t.Fatalf("PruneSentIn: %d, %v; want 2", n, err)
	}

	for _, bad := range []string{"NATS", "1n", "public", "where", "pg_nats"} {
		check := func(what string, err error, config bool) {
			t.Helper()
			if !errors.Is(err, migrations.ErrInvalidSchema) || config && !errors.Is(err, tenurenats.ErrInvalidConfig) {
				t.Errorf("%s with schema %q: %v", what, bad, err)
			}
		}
		_, err := tenurenats.NewClient(e.js, &tenurenats.ClientConfig{Schema: bad})
		check("NewClient", err, true)
		_, err = tenurenats.NewRelay(pool, e.js, &tenurenats.RelayConfig{Schema: bad})
		check("NewRelay", err, true)
		bc := e.config(nil)
		bc.Schema = bad
		_, err = tenurenats.NewWorker(e.js, bc)
		check("NewWorker", err, true)
		_, _, err = tenurenats.PendingIn(ctx, pool, bad)
		check("PendingIn", err, false)
		_, err = tenurenats.PruneSentIn(ctx, pool, bad, time.Hour)
		check("PruneSentIn", err, false)
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tenurenats.Publish(ctx, tx, "orders.paid", nil, &tenurenats.PublishOpts{Schema: bad})
			return err
		})
		check("Publish", err, false)
	}
}

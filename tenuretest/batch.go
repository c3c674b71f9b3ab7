package tenuretest

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// WorkBatchOpts adjust WorkBatch. A nil *WorkBatchOpts means the defaults.
type WorkBatchOpts struct {
	// Insert are every job's insert options, as WorkOpts.Insert.
	Insert *jobs.InsertOpts
	// Batch are the batch kind's options, as for worker.RegisterBatch. Default: MaxSize as
	// many jobs as WorkBatch is given (at most worker.MaxBatchSize), so they reach the
	// handler in one call; the rest of the kind's options as in production.
	Batch *worker.BatchOptions
	// Timeout bounds the wait for every job's outcome. Default 30s.
	Timeout time.Duration
	// Schema is the schema Tenure lives in, as WorkOpts.Schema.
	Schema string
}

// WorkBatch is Work for a batch kind (worker.RegisterBatch): it enqueues a job per element
// of args (one transaction), starts a worker on pool whose only handler is the batch handler
// fn, with one handler slot per job (at most 10,000), waits for the outcome of each job's
// first attempt, stops the worker and returns the outcomes in args' order. The jobs are
// claimed for real (claim tokens, leases, heartbeats, fenced finishes), so
// worker.JobContext, SetOutput, Effect and CompleteTx behave as in production. How the
// jobs were split into calls is fn's to record. The test fails if a job is not claimed and
// finished within opts.Timeout.
func WorkBatch[A generics.Args](ctx context.Context, t T, pool *pgxpool.Pool, fn func(ctx context.Context, batch []*generics.Job[A]) ([]error, error), args []A, opts *WorkBatchOpts) []Result {
	t.Helper()
	if len(args) == 0 {
		return nil
	}
	var o WorkBatchOpts
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	var bopts worker.BatchOptions
	if o.Batch != nil {
		bopts = *o.Batch
	}
	if bopts.MaxSize == 0 {
		bopts.MaxSize = min(len(args), worker.MaxBatchSize)
	}
	queue := queueFor(args[0], &bopts.HandlerOptions, o.Insert)
	outcomes := make(chan worker.Outcome, len(args))
	w, err := newTestWorker(pool, o.Schema, queue, min(len(args), 10000), outcomes)
	if err != nil {
		t.Fatalf("tenuretest: WorkBatch: %v", err)
		return nil
	}
	if err := worker.RegisterBatch(w, fn, &bopts); err != nil {
		t.Fatalf("tenuretest: WorkBatch: %v", err)
		return nil
	}
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), Schema: o.Schema})
	if err != nil {
		t.Fatalf("tenuretest: WorkBatch: %v", err)
		return nil
	}
	ps := make([]jobs.InsertManyParams, len(args))
	for i, a := range args {
		ps[i] = jobs.InsertManyParams{Args: a, Opts: o.Insert}
	}
	res, err := client.InsertMany(ctx, ps)
	if err != nil {
		t.Fatalf("tenuretest: WorkBatch: enqueue: %v", err)
		return nil
	}
	index := make(map[int64]int, len(res))
	for i, r := range res {
		index[r.Job.ID] = i
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("tenuretest: WorkBatch: %v", err)
		return nil
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Errorf("tenuretest: WorkBatch: stopping the worker: %v", err)
		}
	}
	results := make([]Result, len(args))
	seen := 0
	timeout := time.After(o.Timeout)
	for seen < len(args) {
		select {
		case out := <-outcomes:
			i, ok := index[out.Job.ID]
			if !ok || results[i].Job != nil {
				continue
			}
			results[i] = Result{Outcome: out, Job: out.Job}
			seen++
		case <-timeout:
			stop()
			t.Fatalf("tenuretest: WorkBatch: %d of %d jobs (%s) got no outcome within %v", len(args)-seen, len(args), args[0].Kind(), o.Timeout)
			return nil
		case <-ctx.Done():
			stop()
			t.Fatalf("tenuretest: WorkBatch: %v", ctx.Err())
			return nil
		}
	}
	stop()
	for i := range results {
		got, err := client.Get(context.WithoutCancel(ctx), results[i].Job.ID)
		if err != nil {
			t.Fatalf("tenuretest: WorkBatch: reading job %d: %v", results[i].Job.ID, err)
			return nil
		}
		results[i].Job = got
	}
	return results
}

// queueFor is the queue a job of args lands in, as in production: the insert's, the args
// type's declared default (generics.ArgsWithDefaults), the handler options', the package
// default.
func queueFor(args generics.Args, hopts *worker.HandlerOptions, insert *jobs.InsertOpts) string {
	queue := jobs.DefaultQueue
	if hopts != nil && hopts.Queue != "" {
		queue = hopts.Queue
	}
	if d, ok := generics.DefaultsOf(args); ok && d.Queue != "" {
		queue = d.Queue
	}
	if insert != nil && insert.Queue != "" {
		queue = insert.Queue
	}
	return queue
}

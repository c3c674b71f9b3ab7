// Package tenuretest helps test code that uses Tenure, against a real PostgreSQL:
//
//   - Pool gives each test a throwaway database with Tenure's schema migrated, dropped when
//     the test ends (PoolIn: migrated into a schema of your choosing, WorkOpts.Schema and
//     Match.Schema then point the helpers at it);
//   - RequireEnqueued and RequireNotEnqueued check what a piece of code enqueued (by kind,
//     queue, priority, state and a predicate on the args), in a pool or inside a transaction;
//   - Work runs one job through a real claim by a real worker, so the handler gets a real
//     claim token and worker.Effect and worker.CompleteTx work as in production;
//   - WorkBatch does the same for a batch kind (worker.RegisterBatch): many jobs, one handler
//     call, an outcome per job;
//   - RunWorkflow runs a whole workflow (jobs.Workflow) through real claims and returns every
//     task's final state and the order in which they started.
//
// The server: $TEST_DATABASE_URL (an admin database URL, e.g.
// postgres://postgres@127.0.0.1:5432/postgres), else a server on 127.0.0.1:5432 that trusts
// user postgres. Call Main from TestMain to also start a throwaway cluster from the local
// PostgreSQL binaries when neither is there (and stop it afterwards):
//
//	func TestMain(m *testing.M) { tenuretest.Main(m) }
//
// Databases are cloned from a template migrated once per server and schema version, so a
// fresh database costs a few tens of milliseconds.
package tenuretest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/jobrow"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// T is the part of testing.TB the helpers use; *testing.T, *testing.B and *testing.F satisfy
// it.
type T interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// DB is what RequireEnqueued and RequireNotEnqueued read through: a *pgxpool.Pool, a
// *pgx.Conn or a pgx.Tx (to see jobs enqueued in a transaction that has not committed).
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Main is for TestMain: it finds a PostgreSQL server or starts a throwaway one, runs the
// tests, stops the server if it started one, and exits with the tests' code.
func Main(m *testing.M) { pgtest.Main(m) }

// Pool returns a pool on a fresh database with Tenure's schema migrated. The pool is closed
// and the database dropped when the test ends.
func Pool(t T) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(asTB(t))
}

// PoolIn returns a pool on a fresh database in which Tenure is migrated into schema (see
// migrations.Options.Schema) and nowhere else: no schema "tenure" exists in it. Pass the same
// schema to Work (WorkOpts.Schema), Find (Match.Schema), jobs.Config and worker.Config. An
// invalid name fails the test. The pool is closed and the database dropped when the test ends.
func PoolIn(t T, schema string) *pgxpool.Pool {
	t.Helper()
	tb := asTB(t)
	runner, err := migrations.NewRunner(migrations.Options{Schema: schema})
	if err != nil {
		t.Fatalf("tenuretest: PoolIn: %v", err)
		return nil
	}
	pool, err := pgxpool.New(context.Background(), pgtest.NewEmptyDB(tb))
	if err != nil {
		t.Fatalf("tenuretest: PoolIn: %v", err)
		return nil
	}
	t.Cleanup(pool.Close)
	if _, err := runner.Up(context.Background(), pool); err != nil {
		t.Fatalf("tenuretest: PoolIn: migrating schema %s: %v", schema, err)
		return nil
	}
	return pool
}

// DatabaseURL creates a fresh migrated database like Pool and returns its URL (for code that
// opens its own connections). The database is dropped when the test ends.
func DatabaseURL(t T) string {
	t.Helper()
	return pgtest.NewMigratedDB(asTB(t))
}

// asTB returns t as the testing.TB the internal harness takes.
func asTB(t T) testing.TB {
	if tb, ok := t.(testing.TB); ok {
		return tb
	}
	return tbFull{t: t}
}

// tbFull adapts a T that is not a testing.TB (an Example's); the harness only calls the
// methods defined here.
type tbFull struct {
	testing.TB
	t T
}

func (t tbFull) Helper()                           { t.t.Helper() }
func (t tbFull) Errorf(format string, args ...any) { t.t.Errorf(format, args...) }
func (t tbFull) Fatalf(format string, args ...any) { t.t.Fatalf(format, args...) }
func (t tbFull) Fatal(args ...any)                 { t.t.Fatalf("%s", fmt.Sprint(args...)) }
func (t tbFull) Cleanup(f func())                  { t.t.Cleanup(f) }
func (t tbFull) Logf(format string, args ...any)   {}

// Match selects enqueued jobs of args type A. Zero fields match everything.
type Match[A generics.Args] struct {
	// Queue, when set, is the job's queue.
	Queue string
	// Priority, when > 0, is the job's priority.
	Priority int
	// State, when set, is the job's state (ready, running, ...). Default: any state.
	State generics.JobState
	// Args, when set, must return true for the job's decoded args.
	Args func(args A) bool
	// Schema is the schema Tenure lives in (as in jobs.Config.Schema). Default "tenure".
	Schema string
}

// Find returns the jobs of kind A (A's Kind()) that match m (nil matches every job of the
// kind), in id order, each as its stored row with its decoded args. It fails the test when the
// jobs cannot be read or a payload does not decode as A.
func Find[A generics.Args](ctx context.Context, t T, db DB, m *Match[A]) []*generics.Job[A] {
	t.Helper()
	var zero A
	if m == nil {
		m = &Match[A]{}
	}
	sch, err := dbschema.New(m.Schema)
	if err != nil {
		t.Fatalf("tenuretest: %v", err)
		return nil
	}
	rows, err := gen.New(sch.Wrap(db)).FindJobs(ctx, gen.FindJobsParams{Kind: zero.Kind(), Queue: m.Queue,
		Priority: int32(m.Priority), State: string(m.State)})
	if err != nil {
		t.Fatalf("tenuretest: reading jobs of kind %q: %v", zero.Kind(), err)
		return nil
	}
	var out []*generics.Job[A]
	for _, r := range rows {
		row, err := jobrow.FromGen(*r, jobs.ErrCorruptRow)
		if err != nil {
			t.Fatalf("tenuretest: reading jobs of kind %q: %v", zero.Kind(), err)
			return nil
		}
		j := &generics.Job[A]{JobRow: row}
		if j.Args, err = generics.Decode[A](nil, row.Payload, row.PayloadVersion); err != nil {
			t.Fatalf("tenuretest: job %d of kind %q: %v", j.ID, zero.Kind(), err)
			return nil
		}
		if m.Args == nil || m.Args(j.Args) {
			out = append(out, j)
		}
	}
	return out
}

// RequireEnqueued fails the test unless at least one job of kind A matches m, and returns
// the matching jobs. The failure lists the jobs of the kind that were found.
func RequireEnqueued[A generics.Args](ctx context.Context, t T, db DB, m *Match[A]) []*generics.Job[A] {
	t.Helper()
	got := Find(ctx, t, db, m)
	if len(got) == 0 {
		var zero A
		t.Fatalf("tenuretest: no %q job matches %s; jobs of the kind: %s", zero.Kind(), describe(m), list(Find[A](ctx, t, db, nil)))
	}
	return got
}

// RequireNotEnqueued fails the test when a job of kind A matches m, listing the matches.
func RequireNotEnqueued[A generics.Args](ctx context.Context, t T, db DB, m *Match[A]) {
	t.Helper()
	if got := Find(ctx, t, db, m); len(got) > 0 {
		var zero A
		t.Fatalf("tenuretest: %d %q job(s) match %s, want none: %s", len(got), zero.Kind(), describe(m), list(got))
	}
}

func describe[A generics.Args](m *Match[A]) string {
	if m == nil {
		return "(any)"
	}
	var parts []string
	if m.Queue != "" {
		parts = append(parts, "queue="+m.Queue)
	}
	if m.Priority > 0 {
		parts = append(parts, fmt.Sprintf("priority=%d", m.Priority))
	}
	if m.State != "" {
		parts = append(parts, "state="+string(m.State))
	}
	if m.Args != nil {
		parts = append(parts, "args predicate")
	}
	if len(parts) == 0 {
		return "(any)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

func list[A generics.Args](js []*generics.Job[A]) string {
	if len(js) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, j := range js {
		if i == 10 {
			fmt.Fprintf(&b, " ... and %d more", len(js)-10)
			break
		}
		args, _ := json.Marshal(j.Args)
		fmt.Fprintf(&b, "\n\tjob %d queue=%s priority=%d state=%s args=%s", j.ID, j.Queue, j.Priority, j.State, args)
	}
	return b.String()
}

// WorkOpts adjust Work. A nil *WorkOpts means the defaults.
type WorkOpts struct {
	// Insert are the job's insert options (queue, priority, ...). Default: the defaults the
	// args type declares (generics.ArgsWithDefaults), then Handler's, then the package
	// defaults — what a production insert gets.
	Insert *jobs.InsertOpts
	// Handler are the handler's options, as for worker.Register: nil runs the handler with
	// the args type's declared timeout and retry policy, as in production.
	Handler *worker.HandlerOptions
	// Timeout bounds the wait for the attempt's outcome. Default 30s.
	Timeout time.Duration
	// Schema is the schema Tenure lives in (jobs.Config.Schema, worker.Config.Schema).
	// Default "tenure".
	Schema string
}

// Result is the outcome of one attempt run by Work.
type Result struct {
	// Outcome is what the worker reported for the attempt: Transition ("succeeded", "retried",
	// "dead", "cancelled", "snoozed"), Code, HandlerErr (what the handler returned) and Err (nil
	// when the fenced write landed). The stored job (Job) carries the handler's output
	// (worker.SetOutput) after a success.
	Outcome worker.Outcome
	// Job is the job as stored after the attempt.
	Job *generics.JobRow
}

// Work enqueues args, starts a worker on pool whose only handler is fn, waits for the
// outcome of the job's first attempt, stops the worker and returns the outcome. The job lands
// in the queue, with the max attempts and lease, that a production insert gives it, and the
// handler runs with the kind's timeout and retry policy (the args type's declared defaults,
// generics.ArgsWithDefaults, merged with opts.Handler as worker.Register does). The handler
// runs under a real claim (claim token, lease, heartbeats), so worker.Effect and
// worker.CompleteTx behave as in production. A failing attempt is scheduled for retry (or
// dead) as usual; Work does not wait for later attempts. The test fails if the job is not
// claimed and finished within opts.Timeout.
func Work[A generics.Args](ctx context.Context, t T, pool *pgxpool.Pool, fn func(ctx context.Context, job *generics.Job[A]) error, args A, opts *WorkOpts) Result {
	t.Helper()
	var o WorkOpts
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	var hopts worker.HandlerOptions
	if o.Handler != nil {
		hopts = *o.Handler
	}
	queue := queueFor(args, &hopts, o.Insert)
	outcomes := make(chan worker.Outcome, 16)
	w, err := newTestWorker(pool, o.Schema, queue, 1, outcomes)
	if err != nil {
		t.Fatalf("tenuretest: Work: %v", err)
		return Result{}
	}
	if err := worker.Register(w, fn, &hopts); err != nil {
		t.Fatalf("tenuretest: Work: %v", err)
		return Result{}
	}
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), Schema: o.Schema})
	if err != nil {
		t.Fatalf("tenuretest: Work: %v", err)
		return Result{}
	}
	res, err := client.Insert(ctx, args, o.Insert)
	if err != nil {
		t.Fatalf("tenuretest: Work: enqueue: %v", err)
		return Result{}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("tenuretest: Work: %v", err)
		return Result{}
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := w.Stop(sctx); err != nil {
			t.Errorf("tenuretest: Work: stopping the worker: %v", err)
		}
	}
	row := res.Job
	timeout := time.After(o.Timeout)
	for {
		select {
		case out := <-outcomes:
			if out.Job.ID != row.ID {
				continue
			}
			stop()
			got, err := client.Get(context.WithoutCancel(ctx), row.ID)
			if err != nil {
				t.Fatalf("tenuretest: Work: reading job %d: %v", row.ID, err)
			}
			return Result{Outcome: out, Job: got}
		case <-timeout:
			stop()
			t.Fatalf("tenuretest: Work: job %d (%s) got no outcome within %v", row.ID, row.Kind, o.Timeout)
			return Result{}
		case <-ctx.Done():
			stop()
			t.Fatalf("tenuretest: Work: %v", ctx.Err())
			return Result{}
		}
	}
}

// newTestWorker is the worker Work and WorkBatch run: one queue with concurrency slots, quick
// polls, every outcome sent to outcomes while it has room.
func newTestWorker(pool *pgxpool.Pool, schema, queue string, concurrency int, outcomes chan worker.Outcome) (*worker.Worker, error) {
	return worker.New(pool, &worker.Config{
		Queues:       map[string]worker.QueueConfig{queue: {Concurrency: concurrency}},
		Schema:       schema,
		FetchPollMin: 10 * time.Millisecond, FetchPollMax: 100 * time.Millisecond,
		OnOutcome: func(out worker.Outcome) {
			select {
			case outcomes <- out:
			default:
			}
		},
	})
}

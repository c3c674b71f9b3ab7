package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type awaitArgs struct {
	N    int    `json:"n"`
	Mode string `json:"mode"` // "", "fail", "block"
}

func (awaitArgs) Kind() string        { return "await_report" }
func (awaitArgs) PayloadVersion() int { return 1 }

type report struct {
	Double int `json:"double"`
}

// TestWaitEachFinalState: Wait returns for succeeded (with the typed output), dead and
// cancelled jobs that real workers finish, woken by the finish's NOTIFY alone (no poll).
func TestWaitEachFinalState(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}}))
	require.NoError(t, err)
	blocked := make(chan int64, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[awaitArgs]) error {
		switch job.Args.Mode {
		case "fail":
			return worker.Permanent(errors.New("no"))
		case "block":
			blocked <- job.ID
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return worker.SetOutput(ctx, report{Double: 2 * job.Args.N})
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(t, err)
	startWorker(t, w)

	row, out, err := jobs.InsertAndWait[report](ctx, c, awaitArgs{N: 21}, nil)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateSucceeded, row.State)
	require.Equal(t, 42, out.Double)

	row, _, err = jobs.InsertAndWait[report](ctx, c, awaitArgs{Mode: "fail"}, nil)
	var ns *jobs.NotSucceededError
	require.ErrorAs(t, err, &ns)
	require.Equal(t, generics.JobStateDead, ns.State)
	require.Equal(t, string(worker.CodePermanent), ns.Code)
	require.Equal(t, generics.JobStateDead, row.State)

	res, err := c.Insert(ctx, awaitArgs{Mode: "block"}, nil)
	require.NoError(t, err)
	got := make(chan *generics.JobRow, 1)
	go func() {
		row, err := c.Wait(ctx, res.Job.ID)
		if err != nil {
			t.Error(err)
		}
		got <- row
	}()
	<-blocked
	outcome, err := c.Cancel(ctx, res.Job.ID, jobs.Action{Actor: "t", Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, outcome)
	row = <-got
	require.Equal(t, generics.JobStateCancelled, row.State, "the running job ended cancelled by its worker's finish")

	// A typed output that does not fit the asked type.
	_, _, err = jobs.InsertAndWait[[]string](ctx, c, awaitArgs{N: 1}, nil)
	require.ErrorIs(t, err, jobs.ErrOutputType)
}

// TestWaitCompleteTx: a job completed inside the handler's own transaction wakes its waiter
// when that transaction commits.
func TestWaitCompleteTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 1}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[awaitArgs]) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := worker.SetOutput(ctx, report{Double: 7}); err != nil {
			return err
		}
		if err := worker.CompleteTx(ctx, tx, job.JobRow); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(t, err)
	startWorker(t, w)
	_, out, err := jobs.InsertAndWait[report](ctx, c, awaitArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, out.Double)
}

// TestWaitWakesOnWorkflowCancellations: a task that ends cancelled without running (its
// dependency died and the database's release cancelled it, two rounds deep; or the workflow was
// cancelled before it ran) wakes its waiter by NOTIFY like any finish (no poll here).
func TestWaitWakesOnWorkflowCancellations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 2}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		if job.Args.Fail {
			return worker.Permanent(errors.New("no"))
		}
		return nil
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(t, err)

	// Cancelled by the release: a dies, b and then c are cancelled by a's finish.
	wf := jobs.NewWorkflow("cascade", nil).
		Add("a", stepArgs{Name: "a", Fail: true}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}}).
		Add("c", stepArgs{Name: "c"}, &jobs.TaskOpts{DependsOn: []string{"b"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	got := make(chan *generics.JobRow, 2)
	for _, task := range []string{"b", "c"} {
		go func() {
			row, err := c.Wait(ctx, res.Tasks[task].ID)
			if err != nil {
				t.Error(err)
			}
			got <- row
		}()
	}
	time.Sleep(200 * time.Millisecond) // the waiters are registered (a later one reads the row anyway)
	startWorker(t, w)
	for range 2 {
		row := <-got
		require.NotNil(t, row)
		require.Equal(t, generics.JobStateCancelled, row.State)
		require.Equal(t, string(worker.CodeDependencyFailed), row.LastErrorCode)
	}

	// Cancelled by CancelWorkflow before it ran: a task in a queue no worker serves.
	wf2 := jobs.NewWorkflow("operator", nil).
		Add("x", stepArgs{Name: "x"}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Queue: "nobody"}}).
		Add("y", stepArgs{Name: "y"}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Queue: "nobody"}, DependsOn: []string{"x"}})
	res2, err := c.InsertWorkflow(ctx, wf2)
	require.NoError(t, err)
	for _, task := range []string{"x", "y"} {
		go func() {
			row, err := c.Wait(ctx, res2.Tasks[task].ID)
			if err != nil {
				t.Error(err)
			}
			got <- row
		}()
	}
	time.Sleep(200 * time.Millisecond)
	_, err = c.CancelWorkflow(ctx, wf2.ID(), jobs.Action{Actor: "t", Reason: "test"})
	require.NoError(t, err)
	for range 2 {
		row := <-got
		require.NotNil(t, row)
		require.Equal(t, generics.JobStateCancelled, row.State)
	}
}

// TestWaitedFinishIsNotHeldByTheLinger: the finish of a job nobody waits for is held by
// FinishLinger (batching at low load); the finish of a job a jobs.Client waits for is written
// at once, whether the waiter announced it after the handler returned (the held finish leaves
// when the announcement arrives), while it ran (InsertAndWait) or before it was claimed. The
// worker's linger is on a fake clock that the test never advances: a finish that waited for
// the linger would never be written, so each waiter returning shows the mechanism, not pace.
func TestWaitedFinishIsNotHeldByTheLinger(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}})
	cfg.FinishLinger = time.Second
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.UseFakeClock(w, time.Now()) // the linger never ends by itself
	// The test is about the finish batcher's linger: a completion that rode on a claim in
	// flight (claim.go, "Completions ride on claims") would land without it.
	worker.NoRide(w)
	var returned atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[awaitArgs]) error {
		defer returned.Add(1)
		if job.Args.Mode == "fail" {
			return worker.Permanent(errors.New("no"))
		}
		return worker.SetOutput(ctx, report{Double: 2 * job.Args.N})
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(t, err)
	startWorker(t, w)
	state := func(id int64) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, "SELECT state::text FROM tenure.jobs WHERE id = $1", id).Scan(&s))
		return s
	}
	waitCtx := func() context.Context {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t.Cleanup(cancel)
		return wctx
	}

	// Nobody waits: the finish is held (the batching of low load is kept).
	held, err := c.Insert(ctx, awaitArgs{N: 1}, nil)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the handler's return", func() bool { return returned.Load() == 1 })
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, "running", state(held.Job.ID), "a finish nobody waits for lingers")

	// A waiter comes after the handler returned: the held finish leaves on its announcement.
	row, err := c.Wait(waitCtx(), held.Job.ID)
	require.NoError(t, err, "the waiter's announcement flushes the held finish")
	require.Equal(t, generics.JobStateSucceeded, row.State)

	// InsertAndWait: announced while the job is ready or running.
	row, out, err := jobs.InsertAndWait[report](waitCtx(), c, awaitArgs{N: 21}, nil)
	require.NoError(t, err)
	require.Equal(t, 42, out.Double)
	require.Equal(t, generics.JobStateSucceeded, row.State)

	// Announced before the claim: the worker remembers the id until the job finishes.
	later, err := c.Insert(ctx, awaitArgs{N: 3}, &jobs.InsertOpts{Delay: time.Second})
	require.NoError(t, err)
	row, err = c.Wait(waitCtx(), later.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateSucceeded, row.State)

	// A job that ends dead is final too.
	row, _, err = jobs.InsertAndWait[report](waitCtx(), c, awaitArgs{Mode: "fail"}, nil)
	var ns *jobs.NotSucceededError
	require.ErrorAs(t, err, &ns)
	require.Equal(t, generics.JobStateDead, row.State)
	require.GreaterOrEqual(t, w.Stats().AwaitedFinishes, int64(4))
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// stepArgs is a workflow task of the tests below: it records its name as its output.
type stepArgs struct {
	Name string `json:"name"`
	// Fail: the handler fails permanently (the task ends dead).
	Fail bool `json:"fail,omitempty"`
}

func (stepArgs) Kind() string        { return "wf_step" }
func (stepArgs) PayloadVersion() int { return 1 }

// flowRun records what the handlers of one test saw.
type flowRun struct {
	mu      sync.Mutex
	started []string
	// early lists tasks that started while one of their dependencies had not succeeded.
	early []string
	// inputs: what each task read with DependencyOutput, by dependency name.
	inputs map[string]map[string]string
	errs   map[string]map[string]error
}

// flowWorker starts a worker running stepArgs tasks: each checks, from the database, that
// every job it waits for (tenure.job_deps) succeeded before it started, reads the outputs of
// its dependencies named in reads, and records its name as its output.
func flowWorker(t *testing.T, pool *pgxpool.Pool, run *flowRun, reads map[string][]string) *worker.Worker {
	t.Helper()
	run.inputs, run.errs = map[string]map[string]string{}, map[string]map[string]error{}
	cfg := fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 4}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		var notDone int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_deps e JOIN tenure.jobs d ON d.id = e.dep_id
			WHERE e.job_id = $1 AND d.state <> 'succeeded' AND e.on_failure <> 'run'`, job.ID).Scan(&notDone); err != nil {
			return err
		}
		in, errs := map[string]string{}, map[string]error{}
		for _, dep := range reads[job.Args.Name] {
			v, err := worker.DependencyOutput[string](ctx, dep)
			in[dep], errs[dep] = v, err
		}
		run.mu.Lock()
		run.started = append(run.started, job.Args.Name)
		if notDone > 0 {
			run.early = append(run.early, job.Args.Name)
		}
		run.inputs[job.Args.Name], run.errs[job.Args.Name] = in, errs
		run.mu.Unlock()
		if job.Args.Fail {
			return worker.Permanent(errors.New("step fails"))
		}
		return worker.SetOutput(ctx, job.Args.Name+"-out")
	}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 2})
	startWorker(t, w)
	return w
}

func taskStates(t *testing.T, c *jobs.Client, id uuid.UUID) map[string]generics.JobState {
	t.Helper()
	v, err := c.Workflow(context.Background(), id)
	require.NoError(t, err)
	out := map[string]generics.JobState{}
	for _, r := range v.Tasks {
		out[r.TaskName] = r.State
	}
	return out
}

func waitAllFinal(t *testing.T, c *jobs.Client, id uuid.UUID) map[string]generics.JobState {
	t.Helper()
	var st map[string]generics.JobState
	waitFor(t, 30*time.Second, "every task final", func() bool {
		st = taskStates(t, c, id)
		for _, s := range st {
			if !s.Final() {
				return false
			}
		}
		return true
	})
	return st
}

// TestWorkflowFanOutFanInDiamond runs a diamond (a -> b, c -> d) and a fan-out/fan-in
// (a -> e1..e8 -> f) through real claims: a task starts only once every dependency
// succeeded (checked by each handler from the table), only the tasks without dependencies
// are ready at insert, and the fan-in tasks read their dependencies' outputs typed.
func TestWorkflowFanOutFanInDiamond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	run := &flowRun{}
	fanIn := []string{}
	for i := 1; i <= 8; i++ {
		fanIn = append(fanIn, fmt.Sprintf("e%d", i))
	}
	reads := map[string][]string{"d": {"b", "c"}, "f": fanIn, "b": {"zzz"}}
	// The client first, the worker after the insert: nothing runs until every check of the
	// inserted state is made.
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("diamond", nil).
		Add("d", stepArgs{Name: "d"}, &jobs.TaskOpts{DependsOn: []string{"b", "c"}}). // before its dependencies: any order
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}}).
		Add("c", stepArgs{Name: "c"}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	for _, e := range fanIn {
		wf.Add(e, stepArgs{Name: e}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	}
	wf.Add("f", stepArgs{Name: "f"}, &jobs.TaskOpts{DependsOn: fanIn})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	require.Equal(t, wf.ID(), res.ID)
	require.Len(t, res.Tasks, 13)
	for name, r := range res.Tasks {
		want := generics.JobStateWaiting
		if name == "a" {
			want = generics.JobStateReady
		}
		require.Equal(t, want, r.State, name)
		require.Equal(t, name, r.TaskName)
		require.Equal(t, wf.ID(), *r.WorkflowID)
	}
	require.Equal(t, 8, res.Tasks["f"].DepsPending)
	require.True(t, res.Tasks["a"].HasDependents)
	require.False(t, res.Tasks["f"].HasDependents)
	require.Less(t, res.Tasks["a"].ID, res.Tasks["d"].ID, "dependencies are inserted first")

	flowWorker(t, pool, run, reads)
	st := waitAllFinal(t, c, wf.ID())
	for name, s := range st {
		require.Equal(t, generics.JobStateSucceeded, s, name)
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	require.Empty(t, run.early, "tasks started before their dependencies succeeded")
	require.Len(t, run.started, 13, "each task ran once: %v", run.started)
	require.Equal(t, "a", run.started[0])
	require.Equal(t, map[string]string{"b": "b-out", "c": "c-out"}, run.inputs["d"])
	for _, e := range fanIn {
		require.Equal(t, e+"-out", run.inputs["f"][e])
	}
	require.ErrorIs(t, run.errs["b"]["zzz"], worker.ErrNotADependency)
}

// TestWorkflowDeadDependency: a task that ends dead cancels the tasks waiting for it (and, in
// turn, theirs: c waits for b), unless a task runs anyway (RunDependents), which then reads
// the failure with DependencyOutput. Tasks that do not depend on the failure run.
func TestWorkflowDeadDependency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	run := &flowRun{}
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("dead", nil).
		Add("a", stepArgs{Name: "a", Fail: true}, nil).
		Add("ok", stepArgs{Name: "ok"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a", "ok"}}).
		Add("c", stepArgs{Name: "c"}, &jobs.TaskOpts{DependsOn: []string{"b"}}).
		Add("anyway", stepArgs{Name: "anyway"}, &jobs.TaskOpts{DependsOn: []string{"a", "ok"}, OnDependencyFailure: jobs.RunDependents}).
		Add("after_ok", stepArgs{Name: "after_ok"}, &jobs.TaskOpts{DependsOn: []string{"ok"}})
	_, err = c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	flowWorker(t, pool, run, map[string][]string{"anyway": {"a", "ok"}})
	st := waitAllFinal(t, c, wf.ID())
	require.Equal(t, map[string]generics.JobState{
		"a": generics.JobStateDead, "ok": generics.JobStateSucceeded, "b": generics.JobStateCancelled,
		"c": generics.JobStateCancelled, "anyway": generics.JobStateSucceeded, "after_ok": generics.JobStateSucceeded,
	}, st)
	v, err := c.Workflow(ctx, wf.ID())
	require.NoError(t, err)
	for _, r := range v.Tasks {
		if r.State == generics.JobStateCancelled {
			require.Equal(t, string(worker.CodeDependencyFailed), r.LastErrorCode, r.TaskName)
			require.Zero(t, r.Attempt, "%s never ran", r.TaskName)
		}
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	require.ElementsMatch(t, []string{"a", "ok", "anyway", "after_ok"}, run.started)
	var de *worker.DependencyError
	require.ErrorAs(t, run.errs["anyway"]["a"], &de)
	require.ErrorIs(t, de, worker.ErrDependencyFailed)
	require.Equal(t, generics.JobStateDead, de.State)
	require.NoError(t, run.errs["anyway"]["ok"])
	require.Equal(t, "ok-out", run.inputs["anyway"]["ok"])
}

// TestWorkflowReleaseInFinishTransaction: the release of a dependent is part of the fenced
// finish of its last dependency, not a later step. Task a completes with worker.CompleteTx in
// the handler's own transaction: right after CompleteTx, inside that transaction, b is
// already ready, while every other session still sees it waiting; on the first attempt the
// handler then rolls back (and fails), and b stays waiting (nothing was released); on the
// second it commits, and b runs. A stale finish (the fenced completion with another claim
// token, as a worker that lost its lease sends it) releases nothing either. (Moving the
// release out of the finish's transaction, to a statement of its own or after the commit,
// fails the in-transaction check or the rolled-back one: see the report of issue 30.)
func TestWorkflowReleaseInFinishTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("in-tx", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	bID := res.Tasks["b"].ID

	type seen struct{ inTx, outside, afterRollback string }
	var (
		mu       sync.Mutex
		attempts []seen
		bStarted atomic.Int32
		aState   = make(chan string, 1)
		stale    = make(chan struct{})
	)
	cfg := fastConfig(nil)
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		if job.Args.Name == "b" {
			var s string
			if err := pool.QueryRow(ctx, "SELECT state::text FROM tenure.jobs WHERE id = $1", res.Tasks["a"].ID).Scan(&s); err != nil {
				return err
			}
			aState <- s
			bStarted.Add(1)
			return nil
		}
		if job.Attempt == 1 {
			<-stale // the test's stale finish comes first
		}
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if err := worker.CompleteTx(ctx, tx, job.JobRow); err != nil {
			return err
		}
		var s seen
		if err := tx.QueryRow(ctx, "SELECT state::text FROM tenure.jobs WHERE id = $1", bID).Scan(&s.inTx); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, "SELECT state::text FROM tenure.jobs WHERE id = $1", bID).Scan(&s.outside); err != nil {
			return err
		}
		if job.Attempt == 1 {
			if err := tx.Rollback(ctx); err != nil {
				return err
			}
			if err := pool.QueryRow(ctx, "SELECT state::text FROM tenure.jobs WHERE id = $1", bID).Scan(&s.afterRollback); err != nil {
				return err
			}
			mu.Lock()
			attempts = append(attempts, s)
			mu.Unlock()
			return errors.New("business rule failed after CompleteTx")
		}
		mu.Lock()
		attempts = append(attempts, s)
		mu.Unlock()
		return tx.Commit(ctx)
	}, &worker.HandlerOptions{Retry: fastRetry, MaxAttempts: 3})
	startWorker(t, w)

	// A stale finish of a: the engine's fenced completion with a token that is not the
	// current attempt's changes nothing and releases nothing.
	waitFor(t, 10*time.Second, "a running", func() bool { return getJob(t, c, res.Tasks["a"].ID).State == generics.JobStateRunning })
	q := gen.New(pool)
	rows, err := q.CompleteMany(ctx, gen.CompleteManyParams{Ids: []int64{res.Tasks["a"].ID}, Tokens: []uuid.UUID{uuid.New()}, Outputs: [][]byte{[]byte("null")}})
	require.NoError(t, err)
	require.Empty(t, rows, "a stale finish changes no row")
	n, err := q.CompleteOne(ctx, gen.CompleteOneParams{ID: res.Tasks["a"].ID, ClaimToken: uuid.New()})
	require.NoError(t, err)
	require.Zero(t, *n)
	require.Equal(t, generics.JobStateWaiting, getJob(t, c, bID).State, "a stale finish releases nothing")
	close(stale)

	waitFor(t, 20*time.Second, "b ran", func() bool { return bStarted.Load() == 1 })
	require.Equal(t, "succeeded", <-aState, "b started after a succeeded")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, attempts, 2)
	require.Equal(t, seen{inTx: "ready", outside: "waiting", afterRollback: "waiting"}, attempts[0],
		"attempt 1: released inside the finish's transaction only, and not at all once it rolled back")
	require.Equal(t, seen{inTx: "ready", outside: "waiting"}, attempts[1])
	waitFor(t, 10*time.Second, "b succeeded", func() bool { return getJob(t, c, bID).State == generics.JobStateSucceeded })
	require.EqualValues(t, 1, bStarted.Load())
}

// TestWorkflowLeaseExpiryFailsDependency: the lease-expiry sweep's failure of the last attempt
// (dead, LEASE_EXPIRED) settles the dependents in the sweep's transaction too: b is cancelled.
func TestWorkflowLeaseExpiryFailsDependency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("expiry", nil).
		Add("a", stepArgs{Name: "a"}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{MaxAttempts: 1}}).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	// Claim a as a worker that then vanishes: its lease (1 s) runs out.
	q := gen.New(pool)
	owned, err := q.ClaimStrict(ctx, gen.ClaimStrictParams{Queue: jobs.DefaultQueue, Kinds: []string{"wf_step"},
		KindVersions: []int32{1}, Batch: 1, WorkerID: "gone", KindLeaseMs: []int32{1000}})
	require.NoError(t, err)
	require.Len(t, owned, 1)
	require.NotNil(t, owned[0].ID)
	require.Equal(t, res.Tasks["a"].ID, *owned[0].ID)
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"other": {}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error { return nil }, nil)
	startWorker(t, w)
	waitFor(t, 20*time.Second, "the sweep", func() bool { return getJob(t, c, res.Tasks["a"].ID).State == generics.JobStateDead })
	b := getJob(t, c, res.Tasks["b"].ID)
	require.Equal(t, generics.JobStateCancelled, b.State)
	require.Equal(t, string(worker.CodeDependencyFailed), b.LastErrorCode)
}

// TestCancelWorkflow: cancelling a workflow cancels its tasks that have not run at once and
// cancels the running one's handler context (it ends cancelled), with one audit entry.
func TestCancelWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("cancel-me", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}}).
		Add("c", stepArgs{Name: "c"}, &jobs.TaskOpts{DependsOn: []string{"b"}, OnDependencyFailure: jobs.RunDependents})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	running := make(chan struct{})
	cause := make(chan error, 1)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		close(running)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	<-running
	act := jobs.Action{Actor: "test", Reason: "stop the workflow"}
	out, err := c.CancelWorkflow(ctx, wf.ID(), act)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{res.Tasks["b"].ID, res.Tasks["c"].ID}, out.Cancelled)
	require.Equal(t, []int64{res.Tasks["a"].ID}, out.Requested)
	require.ErrorIs(t, <-cause, worker.ErrJobCancelled)
	st := waitAllFinal(t, c, wf.ID())
	require.Equal(t, map[string]generics.JobState{"a": generics.JobStateCancelled, "b": generics.JobStateCancelled,
		"c": generics.JobStateCancelled}, st, "c runs anyway on a failed dependency, but the workflow's cancel covers it")
	entries, err := c.Audit(ctx, 0, 0, 100)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, "cancel", entries[0].Action)
	require.Contains(t, string(entries[0].Detail), wf.ID().String())

	_, err = c.CancelWorkflow(ctx, uuid.New(), act)
	require.ErrorIs(t, err, jobs.ErrWorkflowNotFound)
}

// TestWorkflowInAnotherSchema: workflows and sequences work in a schema of their own
// (Config.Schema): the migrated trigger and functions read and write that schema's tables,
// and the release's NOTIFY goes to that schema's channel (the dependent is picked up without
// waiting for a poll: the worker's poll is set to 1 minute here).
func TestWorkflowInAnotherSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	r, err := migrations.NewRunner(migrations.Options{Schema: "flows2"})
	require.NoError(t, err)
	_, err = r.Up(ctx, pool)
	require.NoError(t, err)
	cfg := fastConfig(nil)
	cfg.Schema = "flows2"
	cfg.FetchPollMin, cfg.FetchPollMax = time.Minute, time.Minute
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var ran []string
	var mu sync.Mutex
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		mu.Lock()
		ran = append(ran, job.Args.Name)
		mu.Unlock()
		return nil
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Schema: "flows2"})
	require.NoError(t, err)
	startWorker(t, w)
	time.Sleep(200 * time.Millisecond) // the worker listens
	wf := jobs.NewWorkflow("other-schema", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	_, err = c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := c.Insert(ctx, stepArgs{Name: fmt.Sprintf("s%d", i)}, &jobs.InsertOpts{Sequence: "s"})
		require.NoError(t, err)
	}
	waitFor(t, 20*time.Second, "every job ran", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 5 })
	st := waitAllFinal(t, c, wf.ID())
	require.Equal(t, map[string]generics.JobState{"a": generics.JobStateSucceeded, "b": generics.JobStateSucceeded}, st)
	mu.Lock()
	order := map[string]int{}
	for i, n := range ran {
		order[n] = i
	}
	mu.Unlock()
	require.Less(t, order["a"], order["b"])
	require.Less(t, order["s0"], order["s1"])
	require.Less(t, order["s1"], order["s2"])
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM tenure.job_deps) + (SELECT count(*) FROM tenure.jobs) + (SELECT count(*) FROM tenure.sequences)").Scan(&n))
	require.Zero(t, n, "schema tenure untouched")
	var def string
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_functiondef('flows2.settle_jobs'::regproc)").Scan(&def))
	require.Contains(t, def, "'flows2_jobs'")
	require.NotContains(t, def, "tenure")
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_get_functiondef('flows2.settle_dependents'::regproc)").Scan(&def))
	require.Contains(t, def, "flows2.settle_jobs(")
	require.NotContains(t, def, "tenure")
}

// TestWorkflowRoles: an enqueuer role (tenure.grant_enqueuer) inserts workflows and sequence
// jobs, a worker role (tenure.grant_worker) runs them and releases the dependents, an operator
// role (tenure.grant_operator) cancels a workflow.
func TestWorkflowRoles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 4 })
	enq := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_enqueuer('{role}')"), 2)
	wrk := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_worker('{role}')"), 6)
	opr := pgtest.RolePool(t, pool, pgtest.NewRole(t, pool, "SELECT tenure.grant_operator('{role}')"), 2)
	ce, err := jobs.NewClient(enq, nil)
	require.NoError(t, err)
	co, err := jobs.NewClient(opr, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("roles", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, &jobs.TaskOpts{DependsOn: []string{"a"}})
	_, err = ce.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := ce.Insert(ctx, stepArgs{Name: "s"}, &jobs.InsertOpts{Sequence: "roles"})
		require.NoError(t, err)
	}
	wf2 := jobs.NewWorkflow("roles-cancel", nil).
		Add("x", stepArgs{Name: "x"}, &jobs.TaskOpts{InsertOpts: jobs.InsertOpts{Queue: "unserved"}}).
		Add("y", stepArgs{Name: "y"}, &jobs.TaskOpts{DependsOn: []string{"x"}})
	_, err = ce.InsertWorkflow(ctx, wf2)
	require.NoError(t, err)
	out, err := co.CancelWorkflow(ctx, wf2.ID(), jobs.Action{Actor: "op", Reason: "roles"})
	require.NoError(t, err)
	require.Len(t, out.Cancelled, 2)

	w, err := worker.New(wrk, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error { return nil }, nil)
	startWorker(t, w)
	waitFor(t, 20*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == 5 })
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// Delete on success (HandlerOptions.DeleteOnSuccess, docs/guide.md §28).

// gcArgs is a kind that deletes its succeeded jobs. Mode: "ok" succeeds (after an effect and
// an output), "flaky" fails its first attempt, "poison" always fails, "tx" completes with
// CompleteTx (and commits), "txrollback" calls CompleteTx and rolls back.
type gcArgs struct {
	Mode string `json:"mode"`
	N    int    `json:"n,omitempty"`
}

func (gcArgs) Kind() string        { return "gc" }
func (gcArgs) PayloadVersion() int { return 1 }

// gcDeclared declares delete on success with its args type (generics.KindDefaults).
type gcDeclared struct{}

func (gcDeclared) Kind() string        { return "gc_declared" }
func (gcDeclared) PayloadVersion() int { return 1 }
func (gcDeclared) Defaults() generics.KindDefaults {
	return generics.KindDefaults{DeleteOnSuccess: true}
}

// gcUniqueSucceeded declares delete on success and a unique key held in succeeded: refused.
type gcUniqueSucceeded struct{}

func (gcUniqueSucceeded) Kind() string        { return "gc_unique" }
func (gcUniqueSucceeded) PayloadVersion() int { return 1 }
func (gcUniqueSucceeded) Defaults() generics.KindDefaults {
	return generics.KindDefaults{DeleteOnSuccess: true, Unique: &generics.UniqueDefaults{States: []string{"succeeded"}}}
}

func registerGC(t *testing.T, w *worker.Worker, pool *pgxpool.Pool) {
	t.Helper()
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcArgs]) error {
		switch job.Args.Mode {
		case "flaky":
			if job.Attempt == 1 {
				return errors.New("first attempt fails")
			}
		case "poison":
			return errors.New("always fails")
		case "tx", "txrollback":
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if _, err := tx.Exec(ctx, "INSERT INTO gc_business (job_id) VALUES ($1)", job.ID); err != nil {
				return err
			}
			if err := worker.CompleteTx(ctx, tx, job.JobRow); err != nil {
				return err
			}
			if job.Args.Mode == "txrollback" {
				return tx.Rollback(ctx)
			}
			return tx.Commit(ctx)
		}
		if _, err := worker.Effect(ctx, job.JobRow, "side", func(ctx context.Context, call worker.EffectCall) (int, error) {
			return job.Args.N, nil
		}); err != nil {
			return err
		}
		return worker.SetOutput(ctx, job.Args.N)
	}, &worker.HandlerOptions{DeleteOnSuccess: true, MaxAttempts: 2, Retry: fastRetry})
}

func rowExists(t *testing.T, pool *pgxpool.Pool, id int64) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM tenure.jobs WHERE id = $1)", id).Scan(&ok))
	return ok
}

// Through real claims: a succeeded job of a delete-on-success kind leaves no row (nor effect
// rows); a failed attempt still retries (its row kept until its success deletes it); a dead job
// keeps its row; a kind without the option keeps its succeeded row; the worker counts every
// success.
func TestDeleteOnSuccessLeavesNoRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE gc_business (job_id bigint PRIMARY KEY)")
	require.NoError(t, err)
	var rec outcomes
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.add
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	registerGC(t, w, pool)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcDeclared]) error { return nil }, nil)
	c := newClient(t, pool, w)
	ids := map[string]int64{}
	for _, m := range []string{"ok", "flaky", "poison", "tx", "txrollback"} {
		r, err := c.Insert(ctx, gcArgs{Mode: m, N: 7}, nil)
		require.NoError(t, err)
		ids[m] = r.Job.ID
	}
	kept, err := c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	declared, err := c.Insert(ctx, gcDeclared{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 20*time.Second, "every job final", func() bool { return len(rec.list()) == 9 })

	for _, m := range []string{"ok", "flaky", "tx", "txrollback"} {
		require.False(t, rowExists(t, pool, ids[m]), "%s: a succeeded job of a delete-on-success kind keeps its row", m)
	}
	require.False(t, rowExists(t, pool, declared.Job.ID), "declared DeleteOnSuccess (KindDefaults) not applied")
	require.Equal(t, 0, countState(t, pool, "running"))
	var effects int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.effects").Scan(&effects))
	require.Zero(t, effects, "the ledger rows of a deleted job stay behind")
	got, err := c.Get(ctx, ids["poison"])
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, got.State)
	require.Len(t, got.Errors, 2)
	got, err = c.Get(ctx, kept.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateSucceeded, got.State)
	var business int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM gc_business").Scan(&business))
	require.Equal(t, 1, business, "tx committed its business row, txrollback did not")

	byID := map[int64][]string{}
	for _, o := range rec.list() {
		require.NoError(t, o.Err, "job %d %s", o.Job.ID, o.Transition)
		byID[o.Job.ID] = append(byID[o.Job.ID], o.Transition)
	}
	require.Equal(t, []string{"retried", "succeeded"}, byID[ids["flaky"]])
	require.Equal(t, []string{"retried", "dead"}, byID[ids["poison"]])
	require.Equal(t, []string{"succeeded"}, byID[ids["tx"]], "CompleteTx's committed delete is this attempt's success, not a stale write")
	require.Equal(t, []string{"succeeded"}, byID[ids["txrollback"]])
	s := w.Stats()
	require.EqualValues(t, 6, s.Succeeded)
	require.EqualValues(t, 0, s.StaleRejected)
}

// The delete is fenced like the update it replaces: an attempt that lost the job (another
// owner's claim token and generation, as after a lease expiry and re-claim) deletes nothing,
// through the batched finish and through CompleteTx, and is reported stale. (Unfenced, the
// stale finish would delete the new owner's row.)
func TestDeleteOnSuccessIsFenced(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE gc_business (job_id bigint PRIMARY KEY)")
	require.NoError(t, err)
	var rec outcomes
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.add
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started, release := make(chan int64, 2), make(chan struct{})
	var txErr atomic.Value
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcArgs]) error {
		started <- job.ID
		<-release
		if job.Args.Mode == "tx" {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			err = worker.CompleteTx(ctx, tx, job.JobRow)
			txErr.Store(fmt.Sprint(err))
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		return nil
	}, &worker.HandlerOptions{DeleteOnSuccess: true, Retry: fastRetry})
	c := newClient(t, pool, w)
	a, err := c.Insert(ctx, gcArgs{Mode: "batch"}, nil)
	require.NoError(t, err)
	b, err := c.Insert(ctx, gcArgs{Mode: "tx"}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	<-started
	<-started
	// Another owner takes both jobs over.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET claim_token = gen_random_uuid(), generation = generation + 1,
		locked_by = 'usurper' WHERE id = ANY($1)`, []int64{a.Job.ID, b.Job.ID})
	require.NoError(t, err)
	close(release)
	waitFor(t, 10*time.Second, "both outcomes", func() bool { return len(rec.list()) == 2 })
	require.Contains(t, txErr.Load(), "ownership")
	for _, o := range rec.list() {
		var stale *worker.StaleWriteError
		require.True(t, errors.As(o.Err, &stale), "job %d: %s %v", o.Job.ID, o.Transition, o.Err)
	}
	for _, id := range []int64{a.Job.ID, b.Job.ID} {
		got, err := c.Get(ctx, id)
		require.NoError(t, err, "a stale finish deleted the new owner's row")
		require.Equal(t, generics.JobStateRunning, got.State)
		require.Equal(t, "usurper", got.LockedBy)
	}
	_, err = pool.Exec(ctx, "UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), locked_by = NULL, locked_until = NULL WHERE id = ANY($1)",
		[]int64{a.Job.ID, b.Job.ID})
	require.NoError(t, err)
}

// Under a concurrency limit the permit claim completes finished jobs in its own transaction
// (permits.go): those deletes happen there too.
func TestDeleteOnSuccessThroughPermitClaims(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4,
		Limits: []worker.Limit{{Kind: "gc", MaxRunning: 2}}}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcArgs]) error {
		time.Sleep(time.Millisecond)
		return nil
	}, &worker.HandlerOptions{DeleteOnSuccess: true})
	c := newClient(t, pool, w)
	const n = 60
	for i := range n {
		_, err := c.Insert(ctx, gcArgs{Mode: "ok", N: i}, nil)
		require.NoError(t, err)
	}
	startWorker(t, w)
	waitFor(t, 30*time.Second, "all succeeded", func() bool { return w.Stats().Succeeded == n })
	var rows int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&rows))
	require.Zero(t, rows, "succeeded jobs kept their rows")
	require.Zero(t, w.Stats().StaleRejected)
}

// Workflow tasks and sequence jobs keep their rows (their dependents and DependencyOutput
// read them); so does a job whose unique states hold the key in succeeded (a second insert
// is still a duplicate). A declared unique over succeeded with delete on success is refused.
func TestDeleteOnSuccessKeepsRowsOthersNeed(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 4}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var fanIn atomic.Value
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[stepArgs]) error {
		if job.Args.Name == "c" {
			a, errA := worker.DependencyOutput[string](ctx, "a")
			b, errB := worker.DependencyOutput[string](ctx, "b")
			fanIn.Store(fmt.Sprintf("%s|%s|%v|%v", a, b, errA, errB))
		}
		return worker.SetOutput(ctx, job.Args.Name+"-out")
	}, &worker.HandlerOptions{DeleteOnSuccess: true, Retry: fastRetry})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcArgs]) error { return nil },
		&worker.HandlerOptions{DeleteOnSuccess: true})
	err = worker.Register(w, func(ctx context.Context, job *generics.Job[gcUniqueSucceeded]) error { return nil }, nil)
	require.ErrorIs(t, err, generics.ErrDeleteOnSuccessUnique)
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	c := newClient(t, pool, w)

	wf := jobs.NewWorkflow("gc", nil).
		Add("a", stepArgs{Name: "a"}, nil).
		Add("b", stepArgs{Name: "b"}, nil).
		Add("c", stepArgs{Name: "c"}, &jobs.TaskOpts{DependsOn: []string{"a", "b"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	var seq []int64
	for i := range 3 {
		r, err := c.Insert(ctx, gcArgs{Mode: "ok", N: i}, &jobs.InsertOpts{Sequence: "gc-seq"})
		require.NoError(t, err)
		seq = append(seq, r.Job.ID)
	}
	uniq := &jobs.UniqueOpts{States: []generics.JobState{generics.JobStateSucceeded}}
	u, err := c.Insert(ctx, gcArgs{Mode: "ok", N: 100}, &jobs.InsertOpts{Unique: uniq})
	require.NoError(t, err)
	plain, err := c.Insert(ctx, gcArgs{Mode: "ok", N: 101}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 20*time.Second, "all done", func() bool { return w.Stats().Succeeded == 3+3+2 })

	require.Equal(t, "a-out|b-out|<nil>|<nil>", fanIn.Load(), "the fan-in's DependencyOutput")
	for _, id := range res.Tasks {
		got, err := c.Get(ctx, id.ID)
		require.NoError(t, err)
		require.Equal(t, generics.JobStateSucceeded, got.State)
	}
	for _, id := range append(seq, u.Job.ID) {
		got, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, generics.JobStateSucceeded, got.State)
	}
	require.False(t, rowExists(t, pool, plain.Job.ID))
	again, err := c.Insert(ctx, gcArgs{Mode: "ok", N: 100}, &jobs.InsertOpts{Unique: uniq})
	require.NoError(t, err)
	require.True(t, again.Duplicate, "the unique key over succeeded was freed")
}

// Waiters of a job deleted on success: Wait returns a succeeded row (ID and State only) and no
// error, WaitOutput returns ErrOutputNotKept with it, InsertAndWait too (it listens before it
// inserts, so a job that ends before the wait registers is still seen); a waiter that starts
// after the delete with no listener of its client up then gets ErrNotFound.
func TestWaitOnDeleteOnSuccess(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	gate := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcArgs]) error {
		if job.Args.Mode == "gated" {
			<-gate
		}
		return worker.SetOutput(ctx, job.Args.N)
	}, &worker.HandlerOptions{DeleteOnSuccess: true})
	c := newClient(t, pool, w)
	startWorker(t, w)

	gated, err := c.Insert(ctx, gcArgs{Mode: "gated", N: 1}, nil)
	require.NoError(t, err)
	type res struct {
		row *generics.JobRow
		err error
	}
	waited, typed := make(chan res, 1), make(chan res, 1)
	go func() { r, err := c.Wait(ctx, gated.Job.ID); waited <- res{r, err} }()
	go func() { r, _, err := jobs.WaitOutput[int](ctx, c, gated.Job.ID); typed <- res{r, err} }()
	waitFor(t, 10*time.Second, "the gated job running", func() bool { return countState(t, pool, "running") == 1 })
	time.Sleep(50 * time.Millisecond) // the waiters registered and read the running row
	close(gate)
	r := <-waited
	require.NoError(t, r.err)
	require.Equal(t, gated.Job.ID, r.row.ID)
	require.Equal(t, generics.JobStateSucceeded, r.row.State)
	r = <-typed
	require.ErrorIs(t, r.err, jobs.ErrOutputNotKept)
	require.Equal(t, generics.JobStateSucceeded, r.row.State)

	for i := range 10 {
		// A fresh client each time: its registry does not listen yet.
		row, _, err := jobs.InsertAndWait[int](ctx, newClient(t, pool, w), gcArgs{Mode: "fast", N: i}, nil)
		require.ErrorIs(t, err, jobs.ErrOutputNotKept, "InsertAndWait %d", i)
		require.Equal(t, generics.JobStateSucceeded, row.State)
	}

	// A new client, whose registry did not listen when the job was deleted. The done signal is
	// sent after the finish commits (docs/design.md, "The done signal after the commit"), so
	// the row is gone a little before s<id> is on the channel: a registry listening in between
	// would still hear it and answer "succeeded". The test hears it itself first.
	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_done")
	require.NoError(t, err)
	late, err := c.Insert(ctx, gcArgs{Mode: "fast"}, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "deleted", func() bool { return !rowExists(t, pool, late.Job.ID) })
	for heard := false; !heard; {
		n, err := listen.Conn().WaitForNotification(ctx)
		require.NoError(t, err, "the done signal of the deleted job")
		heard = slices.Contains(strings.Split(n.Payload, ","), fmt.Sprintf("s%d", late.Job.ID))
	}
	_, err = newClient(t, pool, w).Wait(ctx, late.Job.ID)
	require.ErrorIs(t, err, jobs.ErrNotFound)
}

// Workers publish delete on success with their kinds' defaults (tenure.kinds, migration 0024),
// and Stats lists those kinds, so an operator who sees 0 succeeded knows why: the option given
// as a handler option and as a declared default both count; a kind without it is not listed;
// a worker that registers the kind again without the option takes it off the list.
func TestStatsListDeleteOnSuccessKinds(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE gc_business (job_id bigint PRIMARY KEY)")
	require.NoError(t, err)
	cfg := fastConfig(nil)
	cfg.ID = "gc-stats-1"
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	registerGC(t, w, pool)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[gcDeclared]) error { return nil }, nil)
	c := newClient(t, pool, nil)
	require.NoError(t, w.Start(ctx))
	waitFor(t, 30*time.Second, "the published kinds", func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM tenure.kinds WHERE worker_id = 'gc-stats-1'`).Scan(&n) == nil && n == 3
	})
	st, err := c.Stats(ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, []string{"gc", "gc_declared"}, st.DeleteOnSuccess)
	kinds, err := c.DeleteOnSuccessKinds(ctx)
	require.NoError(t, err)
	require.Equal(t, st.DeleteOnSuccess, kinds)
	require.NoError(t, stopWorker(t, w, 10*time.Second))

	// The next deployment keeps gc's succeeded rows: once its worker published, the row of the
	// stopped worker (no longer live) is pruned and gc is off the list.
	cfg2 := fastConfig(nil)
	cfg2.ID = "gc-stats-2"
	w2, err := worker.New(pool, cfg2)
	require.NoError(t, err)
	worker.MustRegister(w2, func(ctx context.Context, job *generics.Job[gcArgs]) error { return nil }, nil)
	require.NoError(t, w2.Start(ctx))
	t.Cleanup(func() { _ = stopWorker(t, w2, 10*time.Second) })
	waitFor(t, 30*time.Second, "gc published again without delete on success", func() bool {
		kinds, err = c.DeleteOnSuccessKinds(ctx)
		return err == nil && len(kinds) == 1
	})
	require.Equal(t, []string{"gc_declared"}, kinds)
}

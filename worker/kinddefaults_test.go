package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// declaredTick declares its kind's defaults with the args type.
type declaredTick struct {
	N int `json:"n"`
}

func (declaredTick) Kind() string        { return "kd_tick" }
func (declaredTick) PayloadVersion() int { return 1 }
func (declaredTick) Defaults() generics.KindDefaults {
	return generics.KindDefaults{Queue: "periodic", Priority: 3, MaxAttempts: 4, Lease: 7 * time.Second,
		Timeout: 300 * time.Millisecond, RetryBase: 50 * time.Millisecond, RetryCap: 100 * time.Millisecond}
}

type orphanArgs struct{}

func (orphanArgs) Kind() string        { return "kd_orphan" }
func (orphanArgs) PayloadVersion() int { return 1 }

type jobCols struct {
	Queue                          string
	Priority, MaxAttempts, LeaseMs int
}

// Register takes the declared defaults as the handler's options (enqueue defaults in the
// registry, the attempt timeout, the retry backoff) and refuses options that contradict them.
func TestRegisterTakesDeclaredDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	noop := func(context.Context, *generics.Job[declaredTick]) error { return nil }

	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"periodic": {Concurrency: 1}}))
	require.NoError(t, err)
	err = worker.Register(w, noop, &worker.HandlerOptions{Queue: "other"})
	require.ErrorIs(t, err, worker.ErrDefaultsConflict)
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
	require.ErrorContains(t, err, "Queue")
	err = worker.Register(w, noop, &worker.HandlerOptions{Timeout: time.Minute})
	require.ErrorIs(t, err, worker.ErrDefaultsConflict)
	// The same values, or engine-only options, are fine.
	require.NoError(t, worker.Register(w, noop, &worker.HandlerOptions{Queue: "periodic", MaxSnoozes: 3}))
	info, ok := w.Registry().Lookup("kd_tick")
	require.True(t, ok)
	require.Equal(t, generics.KindDefaults{Queue: "periodic", Priority: 3, MaxAttempts: 4, Lease: 7 * time.Second,
		Timeout: 300 * time.Millisecond, RetryBase: 50 * time.Millisecond, RetryCap: 100 * time.Millisecond}, info.Defaults)
}

// A handler of a declared kind runs with the declared timeout and retry backoff: an attempt
// that outlives 300ms fails with TIMEOUT and is retried within the 100ms cap.
func TestDeclaredTimeoutAndRetryApply(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	outs := make(chan worker.Outcome, 8)
	cfg := fastConfig(map[string]worker.QueueConfig{"periodic": {Concurrency: 1}})
	cfg.OnOutcome = func(o worker.Outcome) { outs <- o }
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[declaredTick]) error {
		if j.Attempt == 1 {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, nil)
	c := newClient(t, pool, nil) // no registry: the declaration alone decides the queue
	row, err := c.Insert(context.Background(), declaredTick{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	var first worker.Outcome
	select {
	case first = <-outs:
	case <-time.After(60 * time.Second):
		t.Fatal("no outcome")
	}
	require.Equal(t, row.Job.ID, first.Job.ID)
	require.Equal(t, worker.CodeTimeout, first.Code)
	require.Equal(t, "retried", first.Transition)
	// The retry delay drawn by the declared FullJitter{50ms, 100ms}: at most 100ms (the default
	// FullJitter{1s, 1h} draws it from [0, 2s) after attempt 1).
	require.LessOrEqual(t, first.Delay, 100*time.Millisecond, "retry delay within the declared cap")
}

// Periodic jobs of a declared kind land with the declared queue, attempts and lease.
func TestPeriodicHonoursDeclaredDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cfg := fastConfig(map[string]worker.QueueConfig{"other": {Concurrency: 1}})
	cfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("kd", worker.Every(time.Hour),
		func(context.Context, worker.Tick) (declaredTick, error) { return declaredTick{N: 1}, nil },
		&worker.PeriodicOptions{RunOnStart: true})}
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[declaredTick]) error { return nil }, nil)
	startWorker(t, w)
	var id int64
	waitFor(t, 30*time.Second, "the run-on-start job", func() bool {
		return pool.QueryRow(context.Background(), `SELECT id FROM tenure.jobs WHERE kind = 'kd_tick'`).Scan(&id) == nil
	})
	var got jobCols
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT queue, priority, max_attempts, lease_ms FROM tenure.jobs WHERE id = $1`, id).
		Scan(&got.Queue, &got.Priority, &got.MaxAttempts, &got.LeaseMs))
	require.Equal(t, jobCols{"periodic", 3, 4, 7000}, got)
	var schedQueue string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT queue FROM tenure.periodic WHERE name = 'kd'`).Scan(&schedQueue))
	require.Equal(t, "periodic", schedQueue)
}

// Workers publish their kinds' defaults (tenure.kinds) and tenure.enqueue applies them to the
// arguments a caller leaves out, also after every worker stopped; explicit arguments win.
func TestEnqueueFromSQLAppliesPublishedDefaults(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	enqueue := func(sql string) jobCols {
		t.Helper()
		var id int64
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&id))
		var c jobCols
		require.NoError(t, pool.QueryRow(ctx, `SELECT queue, priority, max_attempts, lease_ms FROM tenure.jobs WHERE id = $1`, id).
			Scan(&c.Queue, &c.Priority, &c.MaxAttempts, &c.LeaseMs))
		return c
	}
	// Nothing published: the library's defaults.
	require.Equal(t, jobCols{"default", 2, 25, 30000}, enqueue(`SELECT id FROM tenure.enqueue('kd_tick', '{}')`))

	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"none": {Concurrency: 1}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[declaredTick]) error { return nil }, nil)
	require.NoError(t, w.Start(ctx))
	waitFor(t, 30*time.Second, "the published kind", func() bool {
		var n int
		return pool.QueryRow(ctx, `SELECT count(*) FROM tenure.kinds WHERE kind = 'kd_tick'`).Scan(&n) == nil && n == 1
	})
	var timeoutMs int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT timeout_ms FROM tenure.kinds WHERE kind = 'kd_tick'`).Scan(&timeoutMs))
	require.EqualValues(t, 300, timeoutMs)
	want := jobCols{"periodic", 3, 4, 7000}
	require.Equal(t, want, enqueue(`SELECT id FROM tenure.enqueue('kd_tick', '{}')`))
	require.Equal(t, jobCols{"x", 3, 2, 7000}, enqueue(`SELECT id FROM tenure.enqueue('kd_tick', '{}', queue => 'x', max_attempts => 2)`))
	// Another kind is untouched.
	require.Equal(t, jobCols{"default", 2, 25, 30000}, enqueue(`SELECT id FROM tenure.enqueue('kd_other', '{}')`))
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	require.Equal(t, want, enqueue(`SELECT id FROM tenure.enqueue('kd_tick', '{}')`), "defaults outlive the worker")
}

// Stats shows the ready jobs no live worker can run: a queue no worker serves, a kind no
// worker registers.
func TestStatsShowUnservedKindsAndQueues(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c := newClient(t, pool, nil)
	later := &jobs.InsertOpts{Delay: time.Hour} // stays ready: nothing claims it
	_, err := c.Insert(ctx, declaredTick{}, later)
	require.NoError(t, err)
	mailOpts := *later
	mailOpts.Queue = "mail"
	_, err = c.Insert(ctx, declaredTick{}, &mailOpts)
	require.NoError(t, err)
	orphanOpts := *later
	orphanOpts.Queue = "periodic"
	_, err = c.Insert(ctx, orphanArgs{}, &orphanOpts)
	require.NoError(t, err)

	// No worker at all: everything is unserved.
	st, err := c.Stats(ctx, 0)
	require.NoError(t, err)
	require.Len(t, st.Unserved, 3)
	for _, b := range st.Bands {
		require.False(t, b.QueueServed, "band %s/%d", b.Queue, b.Priority)
	}

	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"periodic": {Concurrency: 1}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[declaredTick]) error { return nil }, nil)
	startWorker(t, w)
	waitFor(t, 30*time.Second, "the worker's registry row and kinds", func() bool {
		st, err = c.Stats(ctx, 0)
		require.NoError(t, err)
		return len(st.Unserved) == 2
	})
	require.ElementsMatch(t, []jobs.UnservedJobs{
		{Queue: "mail", Kind: "kd_tick", Ready: 1, QueueServed: false, KindRegistered: true},
		{Queue: "periodic", Kind: "kd_orphan", Ready: 1, QueueServed: true, KindRegistered: false},
	}, st.Unserved)
	bands := map[string]jobs.BandStats{}
	for _, b := range st.Bands {
		cur := bands[b.Queue] // per queue, over its priority bands
		cur.Queue, cur.QueueServed = b.Queue, b.QueueServed
		cur.Unserved += b.Unserved
		bands[b.Queue] = cur
	}
	require.True(t, bands["periodic"].QueueServed)
	require.EqualValues(t, 1, bands["periodic"].Unserved)
	require.False(t, bands["mail"].QueueServed)
	require.EqualValues(t, 1, bands["mail"].Unserved)
}

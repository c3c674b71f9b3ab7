package worker_test

// Regression tests for the engine defects found by review and fault trials (each failed before
// its fix): bad error messages, handlers returning during Stop, Stop's deadline, rolling
// deploys, a CompleteTx whose read-back fails, and a locked row holding back heartbeats.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// A handler error with a NUL byte and invalid UTF-8 used to make every FailMany of its batch
// fail; the finisher retried it until the lease ended while the heartbeat kept the lease alive,
// so the worker stopped finishing anything and Stop never returned.
func TestBadErrorMessageDoesNotWedgeTheWorker(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 8}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		return errors.New(job.Args.Msg + "\x00 and \xff\xfe bytes " + strings.Repeat("é", 5000))
	}, &worker.HandlerOptions{MaxAttempts: 1})
	var ok atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		ok.Add(1)
		return nil
	}, nil)
	c := newClient(t, pool, w)
	for i := range 2 {
		_, err := c.Insert(ctx, failArgs{Msg: fmt.Sprintf("bad %d", i)}, nil)
		require.NoError(t, err)
	}
	for i := range 50 {
		_, err := c.Insert(ctx, noopArgs{N: i}, nil)
		require.NoError(t, err)
	}
	require.NoError(t, w.Start(ctx))
	waitFor(t, 10*time.Second, "every job to finish", func() bool {
		return countState(t, pool, "succeeded") == 50 && countState(t, pool, "dead") == 2
	})
	var msg string
	require.NoError(t, pool.QueryRow(ctx, `SELECT errors->0->>'message' FROM tenure.jobs WHERE state = 'dead' LIMIT 1`).Scan(&msg))
	require.NotContains(t, msg, "\x00")
	require.True(t, strings.HasPrefix(msg, "bad "), msg)
	require.LessOrEqual(t, len(msg), 2100, "messages are bounded")
	start := time.Now()
	require.NoError(t, stopWorker(t, w, 2*time.Second))
	require.Less(t, time.Since(start), 2*time.Second+stopSlack, "Stop outlived its context")
}

// stopSlack is how far past its context's deadline a Stop may return in these tests: the
// engine's own wait after the deadline is 50 ms; the rest is a loaded machine's scheduling.
// What a Stop that outlived its context would wait for instead (HardStopGrace, 5 s by default;
// a statement on a connection that stopped answering, until the TCP stack gives up) is longer.
const stopSlack = time.Second

// A batch write that fails with a data error is split, so one row cannot block the others;
// this drives the split through the only row-level data error the engine can still meet: none
// of the messages below is stored as given, yet every job ends in its intended state.
func TestFinishBatchWithHostileMessagesAllLand(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	msgs := []string{"\x00", "\xc3\x28", "ok", strings.Repeat("\x00", 3000), `\u0000`, "tab\tnew\nline"}
	var i atomic.Int64
	w2, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"hostile": {Concurrency: 20}}))
	require.NoError(t, err)
	worker.MustRegister(w2, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		return worker.Permanent(errors.New(msgs[int(i.Add(1)-1)%len(msgs)]))
	}, &worker.HandlerOptions{Queue: "hostile"})
	c2 := newClient(t, pool, w2)
	for n := range 35 {
		_, err := c2.Insert(ctx, noopArgs{N: n}, nil)
		require.NoError(t, err)
	}
	startWorker(t, w2)
	waitFor(t, 10*time.Second, "every job dead", func() bool { return countState(t, pool, "dead") == 35 })
	// The rows are final before the loop has counted every settle: wait for the counters.
	waitFor(t, 5*time.Second, "35 dead counted", func() bool { return w2.Stats().Dead == 35 })
	require.Zero(t, w2.Stats().FinishAbandoned)
}

// Stop returns by its context's deadline, always: with a handler that ignores its context,
// and with a database that stopped answering.
func TestStopNeverOutlivesItsContext(t *testing.T) {
	t.Parallel()
	t.Run("handler ignores ctx", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		ctx := context.Background()
		w, err := worker.New(pool, fastConfig(nil)) // default HardStopGrace 5s
		require.NoError(t, err)
		started := make(chan struct{}, 4)
		unblock := make(chan struct{})
		defer close(unblock)
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
			started <- struct{}{}
			<-unblock
			return nil
		}, nil)
		c := newClient(t, pool, w)
		for range 4 {
			_, err := c.Insert(ctx, slowArgs{}, nil)
			require.NoError(t, err)
		}
		require.NoError(t, w.Start(ctx))
		for range 4 {
			<-started
		}
		start := time.Now()
		err = stopWorker(t, w, time.Second)
		took := time.Since(start)
		require.ErrorIs(t, err, worker.ErrHandlersStillRunning)
		require.Less(t, took, time.Second+stopSlack, "Stop outlived its context")
		require.Zero(t, countState(t, pool, "running"), "held jobs are released within the budget")
	})
	t.Run("database stopped answering", func(t *testing.T) {
		t.Parallel()
		pool, _ := chaosPool(t)
		rec := &recorder{}
		w, proxy, started, release := proxiedWorker(t, pool, rec)
		c := newClient(t, pool, nil)
		_, err := c.Insert(context.Background(), chaosArgs{Tag: "blackhole"}, nil)
		require.NoError(t, err)
		<-started
		proxy.blackhole()
		close(release) // the finish now waits on a connection that never answers
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		_ = stopWorker(t, w, time.Second)
		require.Less(t, time.Since(start), time.Second+stopSlack, "Stop outlived its context")
	})
}

// Handlers that ignore cancellation and return while Stop is releasing what they hold used to
// slip between the finish flush and the release: the job stayed running until its lease
// expired. Many handlers returning around the hard-stop point hit that window.
func TestHandlersReturningDuringStopLeaveNothingRunning(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 60}})
	cfg.HardStopGrace = time.Second
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var startedN atomic.Int64
	stopAt := make(chan time.Time, 1)
	var once sync.Once
	var at time.Time
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		startedN.Add(1)
		once.Do(func() { at = <-stopAt })
		// return spread over 0..80 ms around the moment handlers are cancelled (ignoring ctx)
		wait := time.Until(at.Add(time.Duration(job.Args.N%80) * time.Millisecond))
		time.Sleep(wait)
		return nil
	}, nil)
	c := newClient(t, pool, w)
	for n := range 60 {
		_, err := c.Insert(ctx, noopArgs{N: n}, nil)
		require.NoError(t, err)
	}
	require.NoError(t, w.Start(ctx))
	waitFor(t, 5*time.Second, "all handlers running", func() bool { return startedN.Load() == 60 })
	// Stop budget 2 s: handlers are cancelled at 1 s (HardStopGrace before the deadline) and
	// return between 0.96 and 1.04 s, around the cancellation and the finishes it causes.
	stopAt <- time.Now().Add(960 * time.Millisecond)
	_ = stopWorker(t, w, 2*time.Second)
	require.Zero(t, countState(t, pool, "running"), "a job whose handler returned during Stop stayed running")
}

// A rolling deploy: a worker that knows only payload version 1 of a kind and has no handler
// for another kind runs beside a new worker. Old workers must not claim what they cannot run
// (so nothing dies of UNKNOWN_KIND or INVALID_PAYLOAD), and every job ends succeeded.
type deployV1 struct {
	Name string `json:"name"`
}

func (deployV1) Kind() string        { return "deploy" }
func (deployV1) PayloadVersion() int { return 1 }

type deployV2 struct {
	Name  string `json:"name"`
	Extra int    `json:"extra"`
}

func (deployV2) Kind() string        { return "deploy" }
func (deployV2) PayloadVersion() int { return 2 }

type deployNew struct {
	N int `json:"n"`
}

func (deployNew) Kind() string        { return "deploy_new" }
func (deployNew) PayloadVersion() int { return 1 }

func TestRollingDeployOldAndNewWorkers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var oldRan, newRan atomic.Int64
	oldW, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(oldW, func(ctx context.Context, job *generics.Job[deployV1]) error { oldRan.Add(1); return nil }, nil)
	newW, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(newW, func(ctx context.Context, job *generics.Job[deployV2]) error { newRan.Add(1); return nil },
		&worker.HandlerOptions{Upgraders: []generics.Upgrader{generics.Upgrade(1, func(o deployV1) (deployV2, error) {
			return deployV2{Name: o.Name}, nil
		})}})
	worker.MustRegister(newW, func(ctx context.Context, job *generics.Job[deployNew]) error { newRan.Add(1); return nil }, nil)
	oldC, newC := newClient(t, pool, oldW), newClient(t, pool, newW)

	// Phase 1: only the old worker runs; the new code already enqueues v2 and the new kind.
	startWorker(t, oldW)
	for i := range 10 {
		_, err := oldC.Insert(ctx, deployV1{Name: fmt.Sprint(i)}, nil)
		require.NoError(t, err)
		_, err = newC.Insert(ctx, deployV2{Name: fmt.Sprint(i), Extra: i}, nil)
		require.NoError(t, err)
		_, err = newC.Insert(ctx, deployNew{N: i}, nil)
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "old jobs done", func() bool { return oldRan.Load() == 10 })
	// The old worker goes on claiming (every job is inserted by now): five claims that found
	// nothing it can run, observed rather than assumed after a pause.
	empty := oldW.Stats().EmptyClaims
	waitFor(t, 30*time.Second, "five more claims of the old worker", func() bool { return oldW.Stats().EmptyClaims >= empty+5 })
	require.Zero(t, countState(t, pool, "dead"), "an old worker killed jobs it could not run")
	var charged int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state <> 'succeeded' AND attempts > 0`).Scan(&charged))
	require.Zero(t, charged, "an old worker charged attempts of jobs it could not run")

	// Phase 2: the new worker joins; everything ends succeeded.
	startWorker(t, newW)
	waitFor(t, 10*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == 30 })
	require.EqualValues(t, 20, newRan.Load())
	require.Zero(t, oldW.Stats().ErrorCodes[worker.CodeUnknownKind]+oldW.Stats().ErrorCodes[worker.CodeInvalidPayload])
}

// CompleteTx variant: the handler commits its completion, then the engine's connections are
// cut for a moment before it settles the job.
func TestCompleteTxReadBackFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := chaosPool(t)
	rec := &recorder{}
	proxyW, proxy := proxiedEngineWorker(t, pool, rec)
	// Every job is claimed before the first cut: a claim whose reply a cut loses strands its
	// jobs until their lease expires (contract §10 scenario 4), which is not what this tests.
	var started sync.WaitGroup
	started.Add(5)
	worker.MustRegister(proxyW, func(hctx context.Context, job *generics.Job[chaosArgs]) error {
		started.Done()
		started.Wait()
		tx, err := pool.Begin(hctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if err := worker.CompleteTx(hctx, tx, job.JobRow); err != nil {
			return err
		}
		if err := tx.Commit(hctx); err != nil {
			return err
		}
		// the engine loses its connections between the commit and its own settle
		proxy.cut()
		go func() { time.Sleep(20 * time.Millisecond); proxy.restore() }()
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	c := newClient(t, pool, nil)
	for i := range 5 {
		_, err := c.Insert(ctx, chaosArgs{Tag: fmt.Sprint("tx", i)}, nil)
		require.NoError(t, err)
	}
	startWorker(t, proxyW)
	waitFor(t, 15*time.Second, "five outcomes", func() bool { _, o := rec.snapshot(); return len(o) == 5 })
	_, outcomes := rec.snapshot()
	for _, o := range outcomes {
		require.NoError(t, o.Err, "a committed CompleteTx reported as %v", o.Err)
		require.Equal(t, "succeeded", o.Transition)
	}
	require.Zero(t, proxyW.Stats().StaleRejected)
	require.Equal(t, 5, countState(t, pool, "succeeded"))
}

// A job enqueued without the worker's registry gets the lease the running worker declares for
// its kind, at claim time.
func TestWorkerDecidesLeaseAtClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	leases := make(chan time.Duration, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		leases <- job.Lease
		return nil
	}, &worker.HandlerOptions{Lease: 7 * time.Minute})
	c := newClient(t, pool, nil) // no registry: the job is stored with the default 30 s lease
	row, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, row.Job.Lease)
	startWorker(t, w)
	require.Equal(t, 7*time.Minute, <-leases)
}

// Effect keys carry the configured prefix, in EffectCall.Key and in the ledger, so two
// environments sharing one remote account never send the same key for different jobs.
func TestEffectKeyPrefix(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(nil)
	cfg.EffectKeyPrefix = "staging/"
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	keys := make(chan string, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		_, err := worker.Effect(ctx, job.JobRow, "charge", func(ctx context.Context, call worker.EffectCall) (string, error) {
			keys <- call.Key
			return "ok", nil
		})
		return err
	}, nil)
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	want := fmt.Sprintf("staging/job:%d:effect:charge", row.Job.ID)
	require.Equal(t, want, <-keys)
	waitFor(t, 5*time.Second, "the ledger row", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.effects WHERE key = $1", want).Scan(&n))
		return n == 1
	})
	_, err = worker.New(pool, &worker.Config{EffectKeyPrefix: "bad\x00"})
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
}

// An open transaction holding one running job's row lock (an operator's session, or the
// application's transaction around jobs.Client.Cancel) used to hold back the heartbeat of every
// job of its queue: the batched statement waited on the lock, timed out, and the other jobs'
// leases ran out in the database (and were reclaimed and run again) or were given up after two
// timeouts. The heartbeat skips a locked row now: the other jobs keep their leases and finish on
// their first attempt; only the locked job's lease runs out, and it runs again once the lock
// goes.
func TestHeartbeatIsNotHeldBackByALockedRow(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 3}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started := make(chan int64, 8)
	var lockedID atomic.Int64
	const run = 6 * time.Second
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		if job.Attempt > 1 {
			return nil
		}
		started <- job.ID
		if job.ID == lockedID.Load() {
			<-ctx.Done() // the locked job's lease runs out: its handler is cancelled
			return context.Cause(ctx)
		}
		select {
		case <-time.After(run):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, &worker.HandlerOptions{Retry: fastRetry, Timeout: time.Minute})
	c := newClient(t, pool, w)
	ids := make([]int64, 3)
	for i := range ids {
		row, err := c.Insert(ctx, noopArgs{N: i}, &jobs.InsertOpts{Lease: 2 * time.Second})
		require.NoError(t, err)
		ids[i] = row.Job.ID
	}
	lockedID.Store(ids[0])
	startWorker(t, w)
	for range ids {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the three jobs did not start")
		}
	}
	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(ctx) }()
	_, err = locker.Exec(ctx, "SELECT 1 FROM tenure.jobs WHERE id = $1 FOR UPDATE", ids[0])
	require.NoError(t, err)
	time.Sleep(run - time.Second) // well past the 2 s lease, and past a 5 s heartbeat timeout
	require.NoError(t, locker.Rollback(ctx))

	waitFor(t, 15*time.Second, "every job to succeed", func() bool { return countState(t, pool, "succeeded") == 3 })
	for i, id := range ids {
		got := getJob(t, c, id)
		if i == 0 {
			require.EqualValues(t, 2, got.Generation, "the locked job's lease ran out: it ran again")
			continue
		}
		require.EqualValues(t, 1, got.Generation, "job %d kept its lease while another job's row was locked", id)
		require.Empty(t, got.Errors)
	}
	st := w.Stats()
	require.EqualValues(t, 1, st.LeasesLost, "only the locked job's lease was given up: %+v", st)
	require.Zero(t, st.HeartbeatErrors, "no heartbeat waited on the lock until its timeout")
}

package worker_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

const pickSQL = `SELECT id FROM tenure.jobs WHERE state = 'ready' AND queue = 'default' AND run_at <= now()
	ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`

// Scenarios 1 and 3: A holds the first candidate's row lock, B at the same moment gets the
// next one; with every candidate locked, SKIP LOCKED returns 0 rows while a plain read sees them.
func TestSkipLockedHandsOutDistinctJobs(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c := newClient(t, pool, nil)
	insertAt(t, c, 2, jobs.PriorityNormal, time.Now().Add(-time.Second))

	txA, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txA.Rollback(ctx)
	txB, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txB.Rollback(ctx)
	txC, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer txC.Rollback(ctx)

	var a, b int64
	require.NoError(t, txA.QueryRow(ctx, pickSQL).Scan(&a))
	require.NoError(t, txB.QueryRow(ctx, pickSQL).Scan(&b))
	require.NotEqual(t, a, b, "B must get the next candidate, not wait for A's")

	err = txC.QueryRow(ctx, pickSQL).Scan(new(int64))
	require.ErrorIs(t, err, pgx.ErrNoRows, "all candidates locked: zero rows, which is not 'queue empty'")
	var visible int
	require.NoError(t, txC.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE state = 'ready'").Scan(&visible))
	require.Equal(t, 2, visible, "a plain read still sees both ready jobs")
}

// Scenario 2: choosing a job and committing without changing its state protects nothing: the
// same job is chosen again. That is why the claim commits state, token and lease.
func TestSelectWithoutStateChangeIsPickedAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c := newClient(t, pool, nil)
	insertAt(t, c, 1, jobs.PriorityNormal, time.Now().Add(-time.Second))
	var first, second int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, pickSQL).Scan(&first) }))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return tx.QueryRow(ctx, pickSQL).Scan(&second) }))
	require.Equal(t, first, second)
}

// Scenario 8: a poison job fails every attempt and ends dead after max attempts, with
// full-jitter delays between attempts that stay within their bounds.
func TestPoisonJobEndsDeadWithBoundedBackoff(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	var outcomes []worker.Outcome
	cfg := fastConfig(nil)
	cfg.OnOutcome = func(o worker.Outcome) { mu.Lock(); outcomes = append(outcomes, o); mu.Unlock() }
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	policy := worker.FullJitter{Base: 20 * time.Millisecond, Cap: 150 * time.Millisecond, Rand: worker.SeededRand(7)}
	var starts []time.Time
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return errors.New("always broken")
	}, &worker.HandlerOptions{MaxAttempts: 5, Retry: policy})
	c := newClient(t, pool, w)
	row, err := c.Insert(context.Background(), failArgs{Msg: "x"}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 15*time.Second, "job dead", func() bool { return countState(t, pool, "dead") == 1 })
	// OnOutcome runs after the fenced write landed, so it can trail the row by a moment.
	waitFor(t, 5*time.Second, "the dead outcome reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(outcomes) == 5
	})

	got, err := c.Get(context.Background(), row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, 5, got.Attempt)
	require.Len(t, got.Errors, 5)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, starts, 5)
	require.Len(t, outcomes, 5)
	for i, o := range outcomes[:4] {
		require.Equal(t, "retried", o.Transition)
		require.Equal(t, worker.CodeHandlerError, o.Code)
		require.LessOrEqual(t, o.Delay, policy.Bound(o.Job.Attempt), "attempt %d", o.Job.Attempt)
		require.GreaterOrEqual(t, o.Delay, time.Duration(0))
		// the next attempt did not start before the delay (run_at is on the database clock,
		// so allow a little clock and scheduling slack)
		require.GreaterOrEqual(t, starts[i+1].Sub(starts[i]), o.Delay-5*time.Millisecond)
	}
	require.Equal(t, "dead", outcomes[4].Transition)
}

func TestErrorClassification(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	type result struct {
		state, code string
		attempts    int
	}
	cases := map[string]struct {
		fn   func(ctx context.Context) error
		want result
	}{
		"permanent": {func(context.Context) error { return worker.Permanent(errors.New("bad card")) }, result{"dead", "PERMANENT", 1}},
		"remote":    {func(context.Context) error { return worker.WithCode(worker.CodePermanentRemote, errors.New("410")) }, result{"dead", "PERMANENT_REMOTE_ERROR", 1}},
		"panic":     {func(context.Context) error { panic("kaboom") }, result{"dead", "PANIC", 2}},
		"timeout": {func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, result{"dead", "TIMEOUT", 2}},
		"retry-after": {func(context.Context) error { return worker.RetryAfter(errors.New("429"), 10*time.Millisecond) }, result{"dead", "RATE_LIMIT", 2}},
	}
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		return cases[job.Args.Msg].fn(ctx)
	}, &worker.HandlerOptions{MaxAttempts: 2, Timeout: 100 * time.Millisecond, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 2 * time.Millisecond}})
	c := newClient(t, pool, w)
	ids := map[string]int64{}
	for name := range cases {
		row, err := c.Insert(ctx, failArgs{Msg: name}, nil)
		require.NoError(t, err)
		ids[name] = row.Job.ID
	}
	// A payload that no longer decodes (an unknown field) is INVALID_PAYLOAD, dead at once.
	var bad int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, max_attempts) VALUES ('fail', '{"msg":"x","surprise":1}', 5) RETURNING id`).Scan(&bad))
	// A kind nobody here handles is never claimed (a rolling deploy may bring its handler):
	// it stays ready, no attempt charged.
	var unknown int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenure.jobs (kind, payload, max_attempts) VALUES ('nobody', '{}', 1) RETURNING id`).Scan(&unknown))
	startWorker(t, w)
	waitFor(t, 15*time.Second, "all final", func() bool { return countState(t, pool, "dead") == len(cases)+1 })
	for name, id := range ids {
		got, err := c.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, cases[name].want, result{string(got.State), got.LastErrorCode, got.Attempt}, name)
	}
	got, err := c.Get(ctx, bad)
	require.NoError(t, err)
	require.Equal(t, result{"dead", "INVALID_PAYLOAD", 1}, result{string(got.State), got.LastErrorCode, got.Attempt})
	got, err = c.Get(ctx, unknown)
	require.NoError(t, err)
	require.Equal(t, result{"ready", "", 0}, result{string(got.State), got.LastErrorCode, got.Attempt})
	require.EqualValues(t, 2, w.Stats().Panics)
}

// 32 concurrent handlers over 10,000 jobs: each job succeeds exactly once, its handler ran
// once, nothing is left running.
func TestManyHandlersRunEachJobOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const total = 10000
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 32}}))
	require.NoError(t, err)
	var runs sync.Map
	var maxConc, cur atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			m := maxConc.Load()
			if n <= m || maxConc.CompareAndSwap(m, n) {
				break
			}
		}
		v, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		return nil
	}, nil)
	c := newClient(t, pool, w)
	params := make([]jobs.InsertManyParams, total)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: noopArgs{N: i}}
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 60*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	n := 0
	runs.Range(func(_, v any) bool {
		require.EqualValues(t, 1, v.(*atomic.Int64).Load())
		n++
		return true
	})
	require.Equal(t, total, n)
	require.Zero(t, countState(t, pool, "running"))
	require.LessOrEqual(t, maxConc.Load(), int64(32))
	var gens int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE generation <> 1 OR attempts <> 1").Scan(&gens))
	require.Zero(t, gens)
	st := w.Stats()
	require.EqualValues(t, total, st.Succeeded)
	require.Zero(t, st.StaleRejected)
	t.Logf("claims %d (empty %d) for %d jobs, claim p50 %v p99 %v, finish p50 %v p99 %v",
		st.Claims, st.EmptyClaims, st.Claimed, st.ClaimP50, st.ClaimP99, st.FinishP50, st.FinishP99)
}

func TestCancelReadyAndRunning(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	causes := make(chan error, 1)
	running := make(chan int64, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		running <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, &worker.HandlerOptions{Timeout: time.Minute, Lease: time.Hour}) // heartbeats 20 min apart: only the NOTIFY can bring the cancel
	c := newClient(t, pool, w)
	act := jobs.Action{Actor: "ops@example.com", Reason: "customer withdrew"}

	// ready -> cancelled at once
	later, err := c.Insert(ctx, slowArgs{}, &jobs.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	out, err := c.Cancel(ctx, later.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, jobs.Cancelled, out)
	_, err = c.Cancel(ctx, later.Job.ID, act)
	require.ErrorIs(t, err, jobs.ErrAlreadyFinal)
	_, err = c.Cancel(ctx, 987654321, act)
	require.ErrorIs(t, err, jobs.ErrNotFound)
	_, err = c.Cancel(ctx, later.Job.ID, jobs.Action{})
	require.ErrorIs(t, err, jobs.ErrMissingActor)

	// running -> cancel requested -> the handler's context ends -> cancelled
	now, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	require.Equal(t, now.Job.ID, <-running)
	hb := w.Stats().HeartbeatRows
	out, err = c.Cancel(ctx, now.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out)
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, worker.ErrJobCancelled)
		// The NOTIFY reached the handler, not the next heartbeat (20 minutes away): no lease was
		// extended between the request and the handler's cancellation.
		require.Equal(t, hb, w.Stats().HeartbeatRows, "the cancel came by a heartbeat, not the NOTIFY")
	case <-time.After(60 * time.Second): // a liveness bound: the heartbeat would take 20 minutes
		t.Fatal("handler never saw the cancel")
	}
	waitFor(t, 5*time.Second, "cancelled", func() bool { return countState(t, pool, "cancelled") == 2 })
	got, err := c.Get(ctx, now.Job.ID)
	require.NoError(t, err)
	require.Equal(t, "CANCELLED", got.LastErrorCode)
	audit, err := c.Audit(ctx, now.Job.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "ops@example.com", audit[0].Actor)
	require.Equal(t, "cancel", audit[0].Action)
}

func TestReinjectDeadJobIsAudited(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var fail atomic.Bool
	fail.Store(true)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		if fail.Load() {
			return worker.Permanent(errors.New("upstream rejected"))
		}
		return nil
	}, nil)
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, failArgs{Msg: "x"}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "dead", func() bool { return countState(t, pool, "dead") == 1 })
	page, err := c.List(ctx, jobs.ListParams{State: generics.JobStateDead, ErrorCode: "PERMANENT"})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)

	fail.Store(false)
	_, err = c.Reinject(ctx, row.Job.ID, jobs.Action{Actor: "alice", Reason: "upstream fixed"}, nil)
	require.NoError(t, err)
	_, err = c.Reinject(ctx, row.Job.ID, jobs.Action{Actor: "alice", Reason: "again"}, nil)
	require.ErrorIs(t, err, jobs.ErrNotDead)
	waitFor(t, 10*time.Second, "succeeded", func() bool { return countState(t, pool, "succeeded") == 1 })
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Generation, "generation keeps growing across re-injection")
	audit, err := c.Audit(ctx, row.Job.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, audit, 1)
	require.Equal(t, "reinject", audit[0].Action)
	require.Contains(t, string(audit[0].Detail), "PERMANENT")
}

// Graceful stop: soft stop lets handlers finish; at the deadline they are cancelled and
// their jobs released without charging the attempt; nothing stays running; no engine
// goroutine survives.
func TestGracefulStopReleasesAndLeaksNothing(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	before := engineGoroutines()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}}))
	require.NoError(t, err)
	started := make(chan struct{}, 10)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		started <- struct{}{}
		select {
		case <-time.After(job.Args.Sleep):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, nil)
	c := newClient(t, pool, w)
	// two quick jobs finish during the soft stop, two slow ones are released at the deadline
	for _, d := range []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, time.Hour, time.Hour} {
		_, err := c.Insert(ctx, slowArgs{Sleep: d}, nil)
		require.NoError(t, err)
	}
	require.NoError(t, w.Start(ctx))
	for range 4 {
		<-started
	}
	// 4 s: handlers cancelled 2 s in, the release given the rest (room on a loaded machine).
	require.NoError(t, stopWorker(t, w, 4*time.Second))
	require.Zero(t, countState(t, pool, "running"))
	require.Equal(t, 2, countState(t, pool, "succeeded"))
	require.Equal(t, 2, countState(t, pool, "ready"))
	var charged int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND attempts <> 0").Scan(&charged))
	require.Zero(t, charged, "a stop is not the job's failure")
	require.EqualValues(t, 2, w.Stats().Released)
	require.NoError(t, w.Stop(ctx), "a second Stop returns the first one's result")
	waitFor(t, 2*time.Second, "engine goroutines gone", func() bool { return engineGoroutines() <= before })
}

// A handler that ignores cancellation cannot hold its job past Stop: the job is released
// (fenced) and Stop says handlers are still running.
func TestStopWithHandlerIgnoringContext(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(nil)
	cfg.HardStopGrace = 400 * time.Millisecond
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started := make(chan struct{})
	unblock := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		close(started)
		<-unblock // ignores ctx
		return nil
	}, nil)
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	<-started
	err = stopWorker(t, w, time.Second)
	require.ErrorIs(t, err, worker.ErrHandlersStillRunning)
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
	close(unblock) // its late finish must not land: the token is gone
	time.Sleep(100 * time.Millisecond)
	got, err = c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	for name, cfg := range map[string]*worker.Config{
		"queue name":        {Queues: map[string]worker.QueueConfig{"bad queue!": {}}},
		"concurrency":       {Queues: map[string]worker.QueueConfig{"q": {Concurrency: -1}}},
		"claim ahead":       {Queues: map[string]worker.QueueConfig{"q": {ClaimAhead: -1}}},
		"claim ahead above": {Queues: map[string]worker.QueueConfig{"q": {ClaimAhead: 10001}}},
		"engine pool":       {EngineConns: 2},
		"batch":             {MaxClaimBatch: 5000},
		"heartbeat":         {HeartbeatDivisor: 1},
		"fairness":          {Queues: map[string]worker.QueueConfig{"q": {Fairness: worker.Fairness{Quotas: map[int]int{11: 1}}}}},
	} {
		_, err := worker.New(pool, cfg)
		require.ErrorIs(t, err, worker.ErrInvalidConfig, name)
	}
	w, err := worker.New(pool, nil)
	require.NoError(t, err)
	require.ErrorIs(t, worker.Register(w, func(context.Context, *generics.Job[noopArgs]) error { return nil },
		&worker.HandlerOptions{Lease: time.Millisecond}), worker.ErrInvalidConfig)
	require.NoError(t, worker.Register(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil))
	require.ErrorIs(t, worker.Register(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil), generics.ErrDuplicateKind)
	require.ErrorIs(t, w.Stop(context.Background()), worker.ErrNotStarted)
}

func engineGoroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	count := 0
	for _, g := range strings.Split(string(buf[:n]), "\n\n") {
		if strings.Contains(g, "tenure/worker.(*Worker)") || strings.Contains(g, "tenure/worker.(*queueRunner)") {
			count++
		}
	}
	return count
}

// Final jobs past their retention are deleted by the worker's pruner (elected by an advisory
// lock), together with their effect-ledger rows; live jobs are never touched.
func TestRetentionPruning(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(nil)
	cfg.FinishedRetention, cfg.DeadRetention, cfg.PruneEvery = time.Nanosecond, time.Hour, 50*time.Millisecond
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	c := newClient(t, pool, w)
	done, err := c.Insert(ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	later, err := c.Insert(ctx, noopArgs{N: 2}, &jobs.InsertOpts{Delay: time.Hour})
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "succeeded job pruned", func() bool {
		_, err := c.Get(ctx, done.Job.ID)
		return errors.Is(err, jobs.ErrNotFound)
	})
	waitFor(t, 5*time.Second, "the prune counted", func() bool { return w.Stats().Pruned == 1 })
	got, err := c.Get(ctx, later.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
}

// The owner's retry write for a job an operator asked to cancel meanwhile (the handler
// returned a retryable error, then the cancel request landed before the finish) must land
// and end the job cancelled: it used to violate jobs_cancel_request and be abandoned. Found by
// the model-based test (internal/faults TestModelBased).
func TestRetryAfterCancelRequestEndsCancelled(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c := newClient(t, pool, nil)
	row, err := c.Insert(ctx, noopArgs{}, &jobs.InsertOpts{MaxAttempts: 3})
	require.NoError(t, err)
	q := gen.New(pool)
	claimed, err := q.ClaimStrict(ctx, gen.ClaimStrictParams{WorkerID: "w", Queue: "default", Batch: 1,
		Kinds: []string{"noop"}, KindVersions: []int32{1}, KindLeaseMs: []int32{0}})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NotNil(t, claimed[0].ID)
	out, err := c.Cancel(ctx, row.Job.ID, jobs.Action{Actor: "ops", Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out)
	got, err := q.FailMany(ctx, gen.FailManyParams{Ids: []int64{row.Job.ID}, Tokens: []uuid.UUID{*claimed[0].ClaimToken},
		States: []string{"ready"}, DelayUs: []int64{0}, Codes: []string{"HANDLER_ERROR"}, Messages: []string{"boom"}})
	require.NoError(t, err)
	require.Len(t, got, 1, "the owner's fenced write must land")
	require.Equal(t, gen.TenureJobStateCancelled, got[0].State)
	final, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateCancelled, final.State)
	require.Equal(t, "HANDLER_ERROR", final.LastErrorCode)
}

package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// batchArgs is the kind of the batch tests run in the test process.
type batchArgs struct {
	N int `json:"n"`
}

func (batchArgs) Kind() string        { return "batchy" }
func (batchArgs) PayloadVersion() int { return 1 }

// batchRecorder records each batch call's job ids and attempts.
type batchRecorder struct {
	mu    sync.Mutex
	calls [][]*generics.JobRow
}

func (r *batchRecorder) record(batch []*generics.Job[batchArgs]) {
	rows := make([]*generics.JobRow, len(batch))
	for i, j := range batch {
		rows[i] = j.JobRow
	}
	r.mu.Lock()
	r.calls = append(r.calls, rows)
	r.mu.Unlock()
}

func (r *batchRecorder) snapshot() [][]*generics.JobRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]*generics.JobRow(nil), r.calls...)
}

func insertBatchy(t testing.TB, c *jobs.Client, n int, opts *jobs.InsertOpts) []int64 {
	t.Helper()
	ps := make([]jobs.InsertManyParams, n)
	for i := range ps {
		ps[i] = jobs.InsertManyParams{Args: batchArgs{N: i}, Opts: opts}
	}
	res, err := c.InsertMany(context.Background(), ps)
	require.NoError(t, err)
	ids := make([]int64, n)
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// TestBatchMixedResultsLandPerJob: one batch handler returns, per job, success, a retryable
// error, a permanent error and a snooze; each lands on its own job as a single handler's
// result would (retried then succeeded, dead PERMANENT, snoozed uncharged then succeeded), and
// each success carries the output recorded through the job's own context (JobContext).
func TestBatchMixedResultsLandPerJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rec := &batchRecorder{}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 20}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	const maxSize = 8
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchArgs]) ([]error, error) {
		rec.record(batch)
		res := make([]error, len(batch))
		for i, j := range batch {
			switch j.Args.N % 4 {
			case 0:
				if err := worker.SetOutput(worker.JobContext(ctx, j.JobRow), map[string]int{"n": j.Args.N}); err != nil {
					return nil, err
				}
			case 1:
				if j.Attempt == 1 {
					res[i] = errors.New("transient")
				}
			case 2:
				res[i] = worker.Permanent(errors.New("poison"))
			case 3:
				if j.Snoozes == 0 {
					res[i] = worker.Snooze(10 * time.Millisecond)
				}
			}
		}
		return res, nil
	}, &worker.BatchOptions{HandlerOptions: worker.HandlerOptions{Retry: fastRetry}, MaxSize: maxSize, MaxWait: 50 * time.Millisecond})
	c := newClient(t, pool, w)
	ids := insertBatchy(t, c, 40, &jobs.InsertOpts{MaxAttempts: 5})
	startWorker(t, w)
	waitFor(t, 30*time.Second, "every job final", func() bool {
		return countState(t, pool, "succeeded")+countState(t, pool, "dead") == len(ids)
	})
	for n, id := range ids {
		j := getJob(t, c, id)
		switch n % 4 {
		case 0:
			require.Equal(t, generics.JobStateSucceeded, j.State, "job %d", n)
			require.Equal(t, 1, j.Attempt)
			require.JSONEq(t, `{"n":`+strconv.Itoa(n)+`}`, string(j.Output))
		case 1:
			require.Equal(t, generics.JobStateSucceeded, j.State, "job %d", n)
			require.Equal(t, 2, j.Attempt, "retried once")
			require.Len(t, j.Errors, 1)
			require.Equal(t, "HANDLER_ERROR", j.Errors[0].Code)
		case 2:
			require.Equal(t, generics.JobStateDead, j.State, "job %d", n)
			require.Equal(t, 1, j.Attempt)
			require.Equal(t, "PERMANENT", j.LastErrorCode)
		case 3:
			require.Equal(t, generics.JobStateSucceeded, j.State, "job %d", n)
			require.Equal(t, 1, j.Attempt, "a snooze does not charge the attempt")
			require.Equal(t, 1, j.Snoozes)
		}
	}
	seen := 0
	for _, call := range rec.snapshot() {
		require.LessOrEqual(t, len(call), maxSize, "never more than MaxSize jobs per call")
		require.NotEmpty(t, call)
		seen += len(call)
	}
	// 40 first attempts, 10 retries, 10 snoozed re-runs.
	require.Equal(t, 60, seen)
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	st := w.Stats()
	require.EqualValues(t, 60, st.BatchJobs)
	require.Zero(t, st.StaleRejected)
	require.EqualValues(t, 30, st.Succeeded)
	require.EqualValues(t, 10, st.Dead)
	require.EqualValues(t, 10, st.Retried)
	require.EqualValues(t, 10, st.Snoozed)
}

// TestBatchMaxSizeAndEveryJobOnce: 250 ready jobs, MaxSize 40, 100 slots: no call gets more
// than 40 jobs, full batches are formed (a claim of 100 is cut into 40, 40, 20), and every job
// runs and succeeds exactly once.
func TestBatchMaxSizeAndEveryJobOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	rec := &batchRecorder{}
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 100}}))
	require.NoError(t, err)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchArgs]) ([]error, error) {
		rec.record(batch)
		return nil, nil
	}, &worker.BatchOptions{MaxSize: 40, MaxWait: 100 * time.Millisecond})
	c := newClient(t, pool, w)
	ids := insertBatchy(t, c, 250, nil)
	startWorker(t, w)
	waitFor(t, 30*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == len(ids) })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	runs := map[int64]int{}
	full := 0
	for _, call := range rec.snapshot() {
		require.LessOrEqual(t, len(call), 40)
		if len(call) == 40 {
			full++
		}
		for _, j := range call {
			runs[j.ID]++
		}
	}
	require.Positive(t, full, "a claim of 100 ready jobs fills batches of MaxSize")
	require.Len(t, runs, len(ids))
	for id, n := range runs {
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}
	require.EqualValues(t, len(ids), w.Stats().Succeeded)
}

// TestBatchLoneJobAfterMaxWait: a single job of a batch kind is handled alone once MaxWait
// has passed, not held for more jobs that do not come; and not before MaxWait (the batch
// waited for company).
func TestBatchLoneJobAfterMaxWait(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const wait = 300 * time.Millisecond
	type call struct {
		n  int
		at time.Time
	}
	calls := make(chan call, 4)
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 50}}))
	require.NoError(t, err)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchArgs]) ([]error, error) {
		calls <- call{len(batch), time.Now()}
		return nil, nil
	}, &worker.BatchOptions{MaxSize: 50, MaxWait: wait})
	c := newClient(t, pool, w)
	startWorker(t, w)
	ids := insertBatchy(t, c, 1, nil)
	var got call
	select {
	case got = <-calls:
	case <-time.After(30 * time.Second):
		t.Fatal("the lone job was never handled")
	}
	require.Equal(t, 1, got.n)
	j := getJob(t, c, ids[0])
	waitFor(t, 10*time.Second, "the job succeeded", func() bool { return getJob(t, c, ids[0]).State == generics.JobStateSucceeded })
	// The batch formed for MaxWait after the claim (attempted_at is the claim's database
	// time; this machine's clocks agree within far less than the slack).
	require.GreaterOrEqual(t, got.at.Sub(*j.AttemptedAt), wait-100*time.Millisecond)
}

// TestBatchWholeBatchFailures: a batch-level error, a panic and a result slice of the wrong
// length each fail every job of the batch (HANDLER_ERROR, PANIC, HANDLER_ERROR with
// ErrBatchResultLength), each job on its own fenced write.
func TestBatchWholeBatchFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(batch []*generics.Job[batchArgs]) ([]error, error)
		code string
		msg  string
	}{
		{"error", func([]*generics.Job[batchArgs]) ([]error, error) { return nil, errors.New("downstream is down") }, "HANDLER_ERROR", "downstream is down"},
		{"panic", func([]*generics.Job[batchArgs]) ([]error, error) { panic("boom") }, "PANIC", "boom"},
		{"length", func(b []*generics.Job[batchArgs]) ([]error, error) { return make([]error, len(b)-1), nil }, "HANDLER_ERROR", worker.ErrBatchResultLength.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			var outcomes atomic.Int64
			cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}})
			cfg.OnOutcome = func(o worker.Outcome) { outcomes.Add(1) }
			w, err := worker.New(pool, cfg)
			require.NoError(t, err)
			worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchArgs]) ([]error, error) {
				return tc.fn(batch)
			}, &worker.BatchOptions{MaxSize: 5, MaxWait: 100 * time.Millisecond})
			c := newClient(t, pool, w)
			ids := insertBatchy(t, c, 5, &jobs.InsertOpts{MaxAttempts: 1})
			startWorker(t, w)
			waitFor(t, 30*time.Second, "every job dead", func() bool { return countState(t, pool, "dead") == len(ids) })
			for _, id := range ids {
				j := getJob(t, c, id)
				require.Equal(t, tc.code, j.LastErrorCode)
				require.Len(t, j.Errors, 1)
				require.Contains(t, j.Errors[0].Message, tc.msg)
			}
			require.NoError(t, stopWorker(t, w, 10*time.Second))
			require.EqualValues(t, len(ids), outcomes.Load(), "one outcome per job")
		})
	}
}

// TestBatchOneJobCancelledMidBatch: an operator cancels one job of a running batch: that job's
// own context ends with ErrJobCancelled and the job ends cancelled; the batch's context is not
// cancelled and the other jobs succeed.
func TestBatchOneJobCancelledMidBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	started := make(chan []int64, 1)
	batchErr := make(chan error, 1)
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 3}}))
	require.NoError(t, err)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchArgs]) ([]error, error) {
		ids := make([]int64, len(batch))
		for i, j := range batch {
			ids[i] = j.ID
		}
		started <- ids
		res := make([]error, len(batch))
		jctx := worker.JobContext(ctx, batch[0].JobRow)
		select {
		case <-jctx.Done():
			res[0] = context.Cause(jctx)
		case <-time.After(20 * time.Second):
			res[0] = errors.New("never cancelled")
		}
		batchErr <- ctx.Err()
		return res, nil
	}, &worker.BatchOptions{MaxSize: 3, MaxWait: 5 * time.Second})
	c := newClient(t, pool, w)
	ids := insertBatchy(t, c, 3, nil)
	startWorker(t, w)
	var got []int64
	select {
	case got = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("batch never started")
	}
	require.ElementsMatch(t, ids, got, "a full batch starts without waiting for MaxWait")
	out, err := c.Cancel(context.Background(), got[0], jobs.Action{Actor: "test", Reason: "one of the batch"})
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out)
	require.NoError(t, <-batchErr, "the batch context is not cancelled for one job")
	waitFor(t, 10*time.Second, "the batch finished", func() bool {
		return countState(t, pool, "succeeded") == 2 && countState(t, pool, "cancelled") == 1
	})
	require.Equal(t, generics.JobStateCancelled, getJob(t, c, got[0]).State)
}

// TestRegisterBatchOptions: options are checked at registration.
func TestRegisterBatchOptions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	fn := func(context.Context, []*generics.Job[batchArgs]) ([]error, error) { return nil, nil }
	for _, o := range []*worker.BatchOptions{
		{MaxSize: -1}, {MaxSize: worker.MaxBatchSize + 1},
		{MaxWait: 2 * time.Minute}, // above the default 1 minute Timeout
		{HandlerOptions: worker.HandlerOptions{Middleware: []worker.Middleware{func(n worker.HandlerFunc) worker.HandlerFunc { return n }}}},
	} {
		w, err := worker.New(pool, fastConfig(nil))
		require.NoError(t, err)
		require.ErrorIs(t, worker.RegisterBatch(w, fn, o), worker.ErrInvalidConfig, "%+v", o)
	}
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	require.NoError(t, worker.RegisterBatch(w, fn, nil))
	require.ErrorIs(t, worker.Register(w, func(context.Context, *generics.Job[batchArgs]) error { return nil }, nil), generics.ErrDuplicateKind)
	require.ErrorIs(t, worker.RegisterBatch[batchArgs](w, nil, nil), worker.ErrInvalidConfig)
}

// completingBatchWorker starts a test-side worker whose chaosbatch handler records each job's
// attempt and succeeds for all. Its reclaim sweep runs every 100ms.
func completingBatchWorker(t *testing.T, pool *pgxpool.Pool, rec *recorder) *worker.Worker {
	t.Helper()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}})
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[chaosBatchArgs]) ([]error, error) {
		for _, j := range batch {
			rec.attempt(j.JobRow)
		}
		return nil, nil
	}, &worker.BatchOptions{HandlerOptions: worker.HandlerOptions{Retry: fastRetry}, MaxSize: 5, MaxWait: 50 * time.Millisecond})
	startWorker(t, w)
	return w
}

func insertChaosBatch(t *testing.T, c *jobs.Client, n int) []int64 {
	t.Helper()
	ps := make([]jobs.InsertManyParams, n)
	for i := range ps {
		ps[i] = jobs.InsertManyParams{Args: chaosBatchArgs{Tag: strconv.Itoa(i)}, Opts: &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5}}
	}
	res, err := c.InsertMany(context.Background(), ps)
	require.NoError(t, err)
	ids := make([]int64, n)
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// TestBatchWorkerKilledMidBatch: a worker process is SIGKILLed while its batch handler holds
// five jobs. Each job stays running under the dead worker's lease, then is reclaimed on its
// own (LEASE_EXPIRED, attempt consumed) and re-run by another worker as generation 2: one
// succeeded row per job, one attempt of the new worker per job, no stale write.
func TestBatchWorkerKilledMidBatch(t *testing.T) {
	t.Parallel()
	pool, url := chaosPool(t)
	c := newClient(t, pool, nil)
	ids := insertChaosBatch(t, c, 5)
	child := startChild(t, childOpts{DB: url, Handler: "block", ID: "doomed-batch", Concurrency: 5})
	tokens := map[int64]string{}
	for _, id := range ids {
		f := child.waitLine(t, 20*time.Second, "claimed", forJob(id))
		require.Equal(t, "1", f[2], "first claim is generation 1")
		tokens[id] = f[4]
	}
	child.killAndWait(t)
	for _, id := range ids {
		j := getJob(t, c, id)
		require.Equal(t, generics.JobStateRunning, j.State, "a committed claim survives its worker")
		require.Equal(t, "doomed-batch", j.LockedBy)
		require.Equal(t, tokens[id], j.ClaimToken.String())
	}

	rec := &recorder{}
	b := completingBatchWorker(t, pool, rec)
	waitFor(t, 30*time.Second, "every job re-run and succeeded", func() bool { return countState(t, pool, "succeeded") == len(ids) })
	waitFor(t, 10*time.Second, "B's outcomes", func() bool { _, o := rec.snapshot(); return len(o) == len(ids) })
	attempts, outcomes := rec.snapshot()
	require.Len(t, attempts, len(ids), "one attempt per job by the new worker")
	for _, o := range outcomes {
		require.NoError(t, o.Err)
		require.Equal(t, worker.OutcomeSucceeded, o.Transition)
	}
	byToken := map[string]attemptRec{}
	for _, a := range attempts {
		byToken[a.Token.String()] = a
	}
	for _, id := range ids {
		j := getJob(t, c, id)
		require.Equal(t, generics.JobStateSucceeded, j.State)
		require.EqualValues(t, 2, j.Generation)
		require.Equal(t, 2, j.Attempt, "the killed attempt is consumed")
		require.NotEqual(t, tokens[id], j.ClaimToken.String())
		require.Len(t, j.Errors, 1)
		require.Equal(t, "LEASE_EXPIRED", j.Errors[0].Code)
		require.EqualValues(t, 1, j.Errors[0].Generation)
		a, ok := byToken[j.ClaimToken.String()]
		require.True(t, ok, "job %d's success is the new worker's attempt", id)
		require.EqualValues(t, 2, a.Generation)
	}
	require.NoError(t, stopWorker(t, b, 5*time.Second))
	st := b.Stats()
	require.EqualValues(t, len(ids), st.Succeeded)
	require.Zero(t, st.StaleRejected)
}

// TestBatchStaleWorkerFinishRefused: worker A's batch holds three jobs and A is paused
// (SIGSTOP) past their leases; B reclaims and completes each as generation 2. When A wakes and
// its batch handler returns success for all three, each of A's fenced finishes is refused
// (stale, counted), and no row changes.
func TestBatchStaleWorkerFinishRefused(t *testing.T) {
	t.Parallel()
	pool, url := chaosPool(t)
	c := newClient(t, pool, nil)
	ids := insertChaosBatch(t, c, 3)
	a := startChild(t, childOpts{DB: url, Handler: "complete-on-go", ID: "stale-batch", Concurrency: 3})
	for _, id := range ids {
		f := a.waitLine(t, 20*time.Second, "claimed", forJob(id))
		require.Equal(t, "1", f[2])
	}
	a.waitLine(t, 10*time.Second, "batch", nil)
	a.pause()

	rec := &recorder{}
	b := completingBatchWorker(t, pool, rec)
	waitFor(t, 30*time.Second, "B to re-run and complete every job", func() bool { return countState(t, pool, "succeeded") == len(ids) })
	waitFor(t, 10*time.Second, "B's outcomes", func() bool { _, o := rec.snapshot(); return len(o) == len(ids) })
	won := map[int64]*generics.JobRow{}
	for _, id := range ids {
		won[id] = getJob(t, c, id)
		require.EqualValues(t, 2, won[id].Generation)
	}

	a.send(t, "go")
	a.resume()
	for _, id := range ids {
		o := a.waitLine(t, 15*time.Second, "outcome", forJob(id, 1))
		require.Equal(t, "succeeded", o[3], "A's late success: %v", o)
		require.Equal(t, "true", kv(o, "stale"), "A's late finish must be refused as stale: %v", o)
	}
	a.send(t, "stats")
	s := a.waitLine(t, 10*time.Second, "stats", nil)
	require.EqualValues(t, len(ids), kvInt(s, "stale"), "A counts one stale write per job: %v", s)
	require.Zero(t, kvInt(s, "succeeded"))
	for _, id := range ids {
		after := getJob(t, c, id)
		require.Equal(t, generics.JobStateSucceeded, after.State)
		require.EqualValues(t, 2, after.Generation)
		require.Equal(t, *won[id].ClaimToken, *after.ClaimToken, "the job keeps the new generation's token")
		require.Equal(t, won[id].UpdatedAt, after.UpdatedAt, "A wrote nothing")
		require.Equal(t, 2, after.Attempt)
	}
	require.NoError(t, stopWorker(t, b, 5*time.Second))
	require.Zero(t, b.Stats().StaleRejected)
}

// BenchmarkBatchBurnDown: 50,000 pre-inserted no-op jobs burned down by one worker with 100
// slots, by single-job handlers and by a batch handler (MaxSize 100), with the same settings
// (BenchmarkBurnDown's). Each iteration runs every variant once, in turn, so a load change on a
// shared machine hits them alike. Reports jobs/s per variant; the log lines add the claims, the
// batches, the bench process's CPU and the database's statement time (pg_stat_database
// active_time of the bench database) per 1,000 jobs.
func BenchmarkBatchBurnDown(b *testing.B) {
	const total = 50000
	variants := []struct {
		name  string
		batch int // 0: single-job handler
		slots int
	}{{"single", 0, 100}, {"batch100", 100, 100}, {"batch50", 50, 100}}
	if os.Getenv("TENURE_BENCH_BATCH_200") != "" { // what pipelining two batches gives
		variants = append(variants, struct {
			name  string
			batch int
			slots int
		}{"single-200slots", 0, 200}, struct {
			name  string
			batch int
			slots int
		}{"batch100-200slots", 100, 200})
	}
	// TENURE_BENCH_BATCH_ONLY=name[,name]: run only those variants (a CPU profile of one);
	// TENURE_BENCH_BATCH_PROFILE=dir: write each drain's CPU profile (Start to the last
	// outcome) to dir/<variant>-<iteration>.pprof.
	if only := os.Getenv("TENURE_BENCH_BATCH_ONLY"); only != "" {
		keep := variants[:0]
		for _, v := range variants {
			if slices.Contains(strings.Split(only, ","), v.name) {
				keep = append(keep, v)
			}
		}
		variants = keep
	}
	// TENURE_BENCH_BATCH_SLOTS=n: every variant runs n slots (Concurrency);
	// TENURE_BENCH_NORIDE=1: completions go to the finishers, none rides on a claim.
	if n, _ := strconv.Atoi(os.Getenv("TENURE_BENCH_BATCH_SLOTS")); n > 0 {
		for i := range variants {
			variants[i].slots = n
		}
	}
	profDir := os.Getenv("TENURE_BENCH_BATCH_PROFILE")
	rates := make([][]float64, len(variants))
	for it := range b.N {
		for vi, tc := range variants {
			b.StopTimer()
			pool := benchPool(b)
			c := newClient(b, pool, nil)
			insertNoops(b, c, total, nil)
			_, err := pool.Exec(context.Background(), "VACUUM ANALYZE tenure.jobs")
			require.NoError(b, err)
			done := make(chan struct{})
			var n atomic.Int64
			w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
				Queues: map[string]worker.QueueConfig{"default": {Concurrency: tc.slots, Claimers: benchClaimers}},
				OnOutcome: func(worker.Outcome) {
					if n.Add(1) == total {
						close(done)
					}
				}})
			require.NoError(b, err)
			if os.Getenv("TENURE_BENCH_NORIDE") != "" {
				worker.NoRide(w)
			}
			if tc.batch == 0 {
				worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
			} else {
				worker.MustRegisterBatch(w, func(context.Context, []*generics.Job[noopArgs]) ([]error, error) { return nil, nil },
					&worker.BatchOptions{MaxSize: tc.batch, MaxWait: 100 * time.Millisecond})
			}
			dbBefore := dbActivity(b, pool)
			var prof *os.File
			if profDir != "" {
				prof, err = os.Create(filepath.Join(profDir, fmt.Sprintf("%s-%d.pprof", tc.name, it)))
				require.NoError(b, err)
				require.NoError(b, pprof.StartCPUProfile(prof))
			}
			if profDir != "" {
				writeHeapProfile(b, filepath.Join(profDir, fmt.Sprintf("%s-%d.heap0", tc.name, it)))
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocsBefore, bytesBefore, gcsBefore := ms.Mallocs, ms.TotalAlloc, ms.NumGC
			cpuBefore := processCPU()
			b.StartTimer()
			start := time.Now()
			require.NoError(b, w.Start(context.Background()))
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := processCPU() - cpuBefore
			runtime.ReadMemStats(&ms)
			mallocs, allocBytes, gcs := ms.Mallocs-mallocsBefore, ms.TotalAlloc-bytesBefore, ms.NumGC-gcsBefore
			if prof != nil {
				pprof.StopCPUProfile()
				require.NoError(b, prof.Close())
				writeHeapProfile(b, filepath.Join(profDir, fmt.Sprintf("%s-%d.heap1", tc.name, it)))
			}
			require.NoError(b, stopWorker(b, w, 10*time.Second))
			db := dbActivity(b, pool).minus(dbBefore)
			st := w.Stats()
			require.Zero(b, st.StaleRejected)
			rate := float64(total) / elapsed.Seconds()
			rates[vi] = append(rates[vi], rate)
			k := float64(total) / 1000
			b.Logf("%s: %d jobs in %v = %.0f jobs/s; claims %d (got %d), batches %d, finish writes %d; per 1k jobs: process CPU %.3fs, allocs %.0f (%.0f KiB), GCs %.1f, db statement time %.3fs, transactions %.0f; claim p50 %v, finish p50 %v",
				tc.name, total, elapsed.Round(time.Millisecond), rate, st.Claims, st.Claimed, st.Batches, st.FinishLatency.Count,
				cpu.Seconds()/k, float64(mallocs)/k, float64(allocBytes)/1024/k, float64(gcs)/k, db.activeMs/1000/k, db.xacts/k, st.ClaimP50, st.FinishP50)
		}
	}
	for vi, v := range variants {
		sum := 0.0
		for _, r := range rates[vi] {
			sum += r
		}
		b.ReportMetric(sum/float64(len(rates[vi])), v.name+"-jobs/s")
	}
}

// writeHeapProfile writes the heap profile (allocations since the process started: compare two
// with pprof -base) to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	require.NoError(b, err)
	require.NoError(b, pprof.Lookup("allocs").WriteTo(f, 0))
	require.NoError(b, f.Close())
}

// dbStats are cumulative counters of the bench database (pg_stat_database).
type dbStats struct{ activeMs, xacts float64 }

func (a dbStats) minus(b dbStats) dbStats { return dbStats{a.activeMs - b.activeMs, a.xacts - b.xacts} }

// dbActivity reads the bench database's statement time and commits, after closing the pool's
// connections so that their backends flush their statistics (a backend flushes at exit).
func dbActivity(b *testing.B, pool *pgxpool.Pool) dbStats {
	pool.Reset()
	time.Sleep(200 * time.Millisecond)
	var s dbStats
	require.NoError(b, pool.QueryRow(context.Background(),
		"SELECT coalesce(active_time, 0), xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&s.activeMs, &s.xacts))
	return s
}

// processCPU is the bench process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// batchV2Args is version 2 of a batch kind whose upgrader from version 1 panics.
type batchV2Args struct {
	N int `json:"n"`
}

func (batchV2Args) Kind() string        { return "batchup" }
func (batchV2Args) PayloadVersion() int { return 2 }

// TestBatchUpgraderPanicFailsOnlyItsJob: a payload whose upgrader panics while the batch is
// decoded fails its own job (PANIC), not the batch's other job. Before decodeRecovered the
// panic reached the call's recover and failed both (and before callBatch it escaped the batch
// goroutine and killed the process).
func TestBatchUpgraderPanicFailsOnlyItsJob(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var got atomic.Int64
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}}))
	require.NoError(t, err)
	worker.MustRegisterBatch(w, func(ctx context.Context, batch []*generics.Job[batchV2Args]) ([]error, error) {
		got.Add(int64(len(batch)))
		return nil, nil
	}, &worker.BatchOptions{MaxSize: 2, MaxWait: 100 * time.Millisecond, HandlerOptions: worker.HandlerOptions{
		Upgraders: []generics.Upgrader{generics.UpgradeJSON(1, func(json.RawMessage) (json.RawMessage, error) { panic("upgrader exploded") })},
	}})
	c := newClient(t, pool, w)
	res, err := c.InsertMany(context.Background(), []jobs.InsertManyParams{
		{Args: batchV2Args{N: 1}, Opts: &jobs.InsertOpts{MaxAttempts: 1}}, {Args: batchV2Args{N: 2}, Opts: &jobs.InsertOpts{MaxAttempts: 1}}})
	require.NoError(t, err)
	old := res[0].Job.ID
	_, err = pool.Exec(context.Background(), "UPDATE tenure.jobs SET payload_version = 1 WHERE id = $1", old)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 30*time.Second, "both jobs final", func() bool {
		return countState(t, pool, "dead") == 1 && countState(t, pool, "succeeded") == 1
	})
	j := getJob(t, c, old)
	require.Equal(t, generics.JobStateDead, j.State)
	require.Equal(t, "PANIC", j.LastErrorCode)
	require.Contains(t, j.Errors[0].Message, "upgrader exploded")
	require.Equal(t, generics.JobStateSucceeded, getJob(t, c, res[1].Job.ID).State)
	require.EqualValues(t, 1, got.Load(), "only the job that decoded reached the handler")
}

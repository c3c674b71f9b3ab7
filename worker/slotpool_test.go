package worker_test

import (
	"context"
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

// The worker-wide slot pool (worker.Config.Slots; engine/slotpool.go). These tests run real
// workers on real PostgreSQL.

func TestSlotPoolConfigValidated(t *testing.T) {
	pool := pgtest.NewPool(t)
	for _, n := range []int{-1, 100001} {
		cfg := fastConfig(map[string]worker.QueueConfig{"a": {}, "b": {}})
		cfg.Slots = n
		_, err := worker.New(pool, cfg)
		require.ErrorIs(t, err, worker.ErrInvalidConfig, "Slots %d", n)
	}
}

// 20 queues of Concurrency 5 sharing 8 slots: never more than 8 handlers at once over all
// queues, never more than 5 in a queue, every job exactly once.
func TestSlotPoolCapsHandlersAcrossQueues(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const slots = 8
	qs := manyQueues(20, 5)
	cfg := fastConfig(qs)
	cfg.Slots = slots
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	cur, peak := map[string]int{}, map[string]int{}
	all, allPeak := 0, 0
	var runs sync.Map
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		cur[job.Queue]++
		all++
		peak[job.Queue] = max(peak[job.Queue], cur[job.Queue])
		allPeak = max(allPeak, all)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // the handler's work: handlers overlap
		v, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		mu.Lock()
		cur[job.Queue]--
		all--
		mu.Unlock()
		return nil
	}, nil)
	total := insertPerQueue(t, newClient(t, pool, w), qs, 10, nil)
	startWorker(t, w)
	waitFor(t, 90*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	n := 0
	runs.Range(func(_, v any) bool {
		require.EqualValues(t, 1, v.(*atomic.Int64).Load())
		n++
		return true
	})
	require.Equal(t, total, n)
	require.LessOrEqual(t, allPeak, slots, "the queues together ran more handlers than the pool's slots")
	for name, c := range qs {
		require.LessOrEqual(t, peak[name], c.Concurrency, "queue %s ran more handlers than its Concurrency", name)
	}
	t.Logf("peak handlers over all queues %d (pool %d)", allPeak, slots)
}

// Fairness between queues: a busy queue that holds every slot of the pool (its Concurrency is
// the pool's size, its backlog deep) does not starve a quiet queue whose jobs arrive later:
// the slots its handlers free go to the quiet queue in turn, so the quiet queue's jobs are all
// done while most of the busy backlog is still ready. Without the turns (a queue keeping the
// slots it holds while another waits) the quiet queue would run nothing until the busy backlog
// is drained.
func TestSlotPoolBusyQueueDoesNotStarveQuietOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const slots, busyJobs, quietJobs = 4, 3000, 20
	// The busy queue has a claimer ready while another claim is in flight: it always wants more.
	qs := map[string]worker.QueueConfig{"busy": {Concurrency: slots, Claimers: slots}, "quiet": {Concurrency: slots}}
	cfg := fastConfig(qs)
	cfg.Slots = slots
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var busyDone, quietDone atomic.Int64
	var busyAtQuietDone atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		time.Sleep(time.Millisecond) // the handler's work: the busy queue keeps its slots busy
		if job.Queue == "busy" {
			busyDone.Add(1)
		} else if quietDone.Add(1) == quietJobs {
			busyAtQuietDone.Store(busyDone.Load())
		}
		return nil
	}, nil)
	c := newClient(t, pool, w)
	var params []jobs.InsertManyParams
	for i := range busyJobs {
		params = append(params, jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Queue: "busy"}})
	}
	_, err = c.InsertMany(context.Background(), params)
	require.NoError(t, err)
	startWorker(t, w)
	// The busy queue runs first, on every slot.
	waitFor(t, 30*time.Second, "the busy queue running", func() bool { return busyDone.Load() >= 50 })
	before := busyDone.Load()
	params = params[:0]
	for i := range quietJobs {
		params = append(params, jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Queue: "quiet"}})
	}
	_, err = c.InsertMany(context.Background(), params)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the quiet queue's jobs done", func() bool { return quietDone.Load() == quietJobs })
	during := busyAtQuietDone.Load() - before
	t.Logf("busy jobs done while the quiet queue's %d ran: %d (busy backlog %d)", quietJobs, during, busyJobs)
	require.Less(t, busyAtQuietDone.Load(), int64(busyJobs/2), "the quiet queue waited for the busy queue's backlog")
	require.NoError(t, stopWorker(t, w, 10*time.Second))
}

// With the pool on, a queue whose Concurrency exceeds an even split claims several jobs per
// request (the point of the pool): 50 queues of Concurrency 20 sharing 40 slots, each with a
// backlog, claim more than one job per batched request on average.
func TestSlotPoolClaimsSeveralJobsPerRequest(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	qs := manyQueues(50, 20)
	cfg := fastConfig(qs)
	cfg.Slots = 40
	cfg.EngineConns = 12
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	total := insertPerQueue(t, newClient(t, pool, w), qs, 40, nil)
	startWorker(t, w)
	waitFor(t, 90*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	stmts, reqs := worker.ClaimBatchStats(w)
	t.Logf("%d jobs, %d batched statements, %d requests", total, stmts, reqs)
	require.Positive(t, reqs)
	require.Greater(t, float64(total)/float64(reqs), 2.0, "jobs per batched request")
}

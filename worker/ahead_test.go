package worker_test

import (
	"context"
	"sync"
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

// Claiming ahead (worker.QueueConfig.ClaimAhead; worker/internal/engine/ahead.go): a queue of
// short handlers claims, while its slots are busy, the jobs they are expected to free slots
// for, and starts each when a slot frees. These tests check what it must never change: no more
// handlers at once than Concurrency, every job run once, a waiting job's timeout counted from
// its handler's start, and a waiting job that cannot start (Stop, an operator's cancel, no slot
// within a second) given back or cancelled without running and without charging its attempt.

type aheadArgs struct {
	Tag string `json:"tag"`
}

func (aheadArgs) Kind() string        { return "ahead" }
func (aheadArgs) PayloadVersion() int { return 1 }

// aheadRig is one worker of one single-slot queue whose handler blocks the job tagged "block"
// until released, and records every other job it runs.
type aheadRig struct {
	pool    *pgxpool.Pool
	w       *worker.Worker
	c       *jobs.Client
	started chan struct{} // the blocking job's handler started
	release chan struct{} // closed: the blocking job's handler returns
	mu      sync.Mutex
	ran     map[string]int           // runs per tag
	left    map[string]time.Duration // per tag, the handler's time left before its deadline at its start
	before  worker.Stats             // after the warm-up
}

func newAheadRig(t *testing.T, timeout time.Duration) *aheadRig {
	t.Helper()
	r := &aheadRig{pool: pgtest.NewPool(t), started: make(chan struct{}, 1), release: make(chan struct{}),
		ran: map[string]int{}, left: map[string]time.Duration{}}
	var err error
	r.w, err = worker.New(r.pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 1, Claimers: 1, ClaimAhead: 1}}))
	require.NoError(t, err)
	worker.MustRegister(r.w, func(ctx context.Context, j *generics.Job[aheadArgs]) error {
		dl, _ := ctx.Deadline()
		r.mu.Lock()
		r.ran[j.Args.Tag]++
		r.left[j.Args.Tag] = time.Until(dl)
		r.mu.Unlock()
		if j.Args.Tag == "block" {
			r.started <- struct{}{}
			select {
			case <-r.release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}, &worker.HandlerOptions{Timeout: timeout})
	r.c = newClient(t, r.pool, r.w)
	return r
}

func (r *aheadRig) runs(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ran[tag]
}

// warmUp runs short jobs until the queue has measured its handlers and claims (the averages
// that decide how much it claims ahead), then parks the slot on a blocking job and returns the
// id of a job the queue claimed ahead behind it: running in the table, its handler not started.
func (r *aheadRig) warmUp(t *testing.T) (blockID, aheadID int64) {
	t.Helper()
	ctx := context.Background()
	startWorker(t, r.w)
	for i := range 20 {
		_, err := r.c.Insert(ctx, aheadArgs{Tag: "warm"}, nil)
		require.NoError(t, err, i)
	}
	waitFor(t, 60*time.Second, "the warm-up jobs", func() bool { return countState(t, r.pool, "succeeded") == 20 })
	waitFor(t, 10*time.Second, "the warm-up outcomes", func() bool { return r.w.Stats().Succeeded == 20 })
	r.before = r.w.Stats()
	b, err := r.c.Insert(ctx, aheadArgs{Tag: "block"}, nil)
	require.NoError(t, err)
	select {
	case <-r.started:
	case <-time.After(60 * time.Second):
		t.Fatal("the blocking job never started")
	}
	v, err := r.c.Insert(ctx, aheadArgs{Tag: "ahead"}, nil)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the job behind it to be claimed ahead", func() bool {
		return getJob(t, r.c, v.Job.ID).State == generics.JobStateRunning
	})
	require.Zero(t, r.runs("ahead"), "claimed ahead while the only slot is busy: not started")
	return b.Job.ID, v.Job.ID
}

// TestClaimAheadKeepsConcurrencyAndRunsEachJobOnce: short handlers on two slots. Jobs are
// claimed ahead (Stats.ClaimedAhead), yet never more than two handlers run at once, each job
// runs exactly once and succeeds. With ClaimAhead 0, the default, nothing is claimed ahead.
func TestClaimAheadKeepsConcurrencyAndRunsEachJobOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ahead int
	}{{"on", 2}, {"off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool := pgtest.NewPool(t)
			w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2, ClaimAhead: tc.ahead}}))
			require.NoError(t, err)
			var now, peak atomic.Int32
			var mu sync.Mutex
			ran := map[int]int{}
			worker.MustRegister(w, func(ctx context.Context, j *generics.Job[noopArgs]) error {
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				ran[j.Args.N]++
				mu.Unlock()
				now.Add(-1)
				return nil
			}, nil)
			c := newClient(t, pool, w)
			const total = 300
			many := make([]jobs.InsertManyParams, total)
			for i := range many {
				many[i] = jobs.InsertManyParams{Args: noopArgs{N: i}}
			}
			_, err = c.InsertMany(ctx, many)
			require.NoError(t, err)
			startWorker(t, w)
			waitFor(t, 120*time.Second, "every job", func() bool { return countState(t, pool, "succeeded") == total })
			require.NoError(t, stopWorker(t, w, 10*time.Second))
			require.LessOrEqual(t, peak.Load(), int32(2), "never more handlers than Concurrency")
			mu.Lock()
			require.Len(t, ran, total)
			for n, k := range ran {
				require.Equal(t, 1, k, "job %d ran once", n)
			}
			mu.Unlock()
			st := w.Stats()
			require.EqualValues(t, total, st.Succeeded)
			require.Zero(t, st.StaleRejected)
			require.Zero(t, st.AheadReleased)
			if tc.ahead == 0 {
				require.Zero(t, st.ClaimedAhead)
			} else {
				require.Positive(t, st.ClaimedAhead, "short handlers: jobs are claimed ahead (claims %d for %d jobs)", st.Claims, st.Claimed)
			}
			t.Logf("claimed ahead %d of %d; %d claims", st.ClaimedAhead, total, st.Claims)
		})
	}
}

// TestClaimAheadTimeoutStartsWithTheHandler: a job claimed ahead waits for the slot; its
// handler still gets the kind's whole timeout.
func TestClaimAheadTimeoutStartsWithTheHandler(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Second
	r := newAheadRig(t, timeout)
	blockID, aheadID := r.warmUp(t)
	time.Sleep(700 * time.Millisecond) // waiting, below aheadMaxWait
	close(r.release)
	waitFor(t, 30*time.Second, "both jobs", func() bool {
		return getJob(t, r.c, blockID).State == generics.JobStateSucceeded && getJob(t, r.c, aheadID).State == generics.JobStateSucceeded
	})
	require.Equal(t, 1, r.runs("ahead"))
	r.mu.Lock()
	left := r.left["ahead"]
	r.mu.Unlock()
	require.Greater(t, left, timeout-500*time.Millisecond, "the timeout counts from the handler's start, not from the claim 700 ms earlier")
	st := r.w.Stats()
	require.EqualValues(t, r.before.ClaimedAhead+1, st.ClaimedAhead, "it started from the waiting list")
	require.Zero(t, st.AheadReleased)
	require.EqualValues(t, 1, getJob(t, r.c, aheadID).Attempt)
}

// TestClaimAheadStopGivesWaitingJobsBack: Stop begins while a job waits for the slot: it goes
// back to ready at once, its attempt not charged, its handler never started.
func TestClaimAheadStopGivesWaitingJobsBack(t *testing.T) {
	t.Parallel()
	r := newAheadRig(t, time.Minute)
	blockID, aheadID := r.warmUp(t)
	require.NoError(t, stopWorker(t, r.w, 10*time.Second)) // the blocking handler returns on its context
	require.Zero(t, r.runs("ahead"))
	got := getJob(t, r.c, aheadID)
	require.Equal(t, generics.JobStateReady, got.State)
	require.Zero(t, got.Attempt, "the attempt is not charged")
	require.Equal(t, generics.JobStateReady, getJob(t, r.c, blockID).State, "the interrupted handler's job is released too")
	require.EqualValues(t, 1, r.w.Stats().AheadReleased)
}

// TestClaimAheadCancelEndsAWaitingJob: an operator cancels a job claimed ahead: it ends
// cancelled without its handler starting, while the slot stays busy.
func TestClaimAheadCancelEndsAWaitingJob(t *testing.T) {
	t.Parallel()
	r := newAheadRig(t, time.Minute)
	blockID, aheadID := r.warmUp(t)
	out, err := r.c.Cancel(context.Background(), aheadID, jobs.Action{Actor: "ops@example.com", Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out, "claimed: running in the table")
	waitFor(t, 30*time.Second, "the waiting job to end cancelled", func() bool {
		return getJob(t, r.c, aheadID).State == generics.JobStateCancelled
	})
	require.Zero(t, r.runs("ahead"), "never started")
	require.Equal(t, generics.JobStateRunning, getJob(t, r.c, blockID).State, "the slot's job runs on")
	close(r.release)
	waitFor(t, 30*time.Second, "the blocking job", func() bool { return getJob(t, r.c, blockID).State == generics.JobStateSucceeded })
	require.Zero(t, r.runs("ahead"))
	require.Equal(t, r.before.ClaimedAhead, r.w.Stats().ClaimedAhead, "it never started from the waiting list")
}

// TestClaimAheadGivesBackAJobNoSlotTakes: the slot stays busy past aheadMaxWait (1 s): the job
// claimed ahead goes back to ready, attempt not charged, and is not claimed ahead again while
// the slot stays busy (no claim-and-release churn). It runs once the slot frees.
func TestClaimAheadGivesBackAJobNoSlotTakes(t *testing.T) {
	t.Parallel()
	r := newAheadRig(t, time.Minute)
	blockID, aheadID := r.warmUp(t)
	waitFor(t, 30*time.Second, "the waiting job to be given back", func() bool {
		return getJob(t, r.c, aheadID).State == generics.JobStateReady
	})
	got := getJob(t, r.c, aheadID)
	require.Zero(t, got.Attempt, "the attempt is not charged")
	require.Zero(t, r.runs("ahead"))
	require.EqualValues(t, 1, r.w.Stats().AheadReleased)
	time.Sleep(2500 * time.Millisecond) // more than two aheadMaxWait
	require.Equal(t, generics.JobStateReady, getJob(t, r.c, aheadID).State, "not claimed ahead again while the slot is held")
	require.EqualValues(t, 1, r.w.Stats().AheadReleased)
	close(r.release)
	waitFor(t, 30*time.Second, "both jobs", func() bool {
		return getJob(t, r.c, blockID).State == generics.JobStateSucceeded && getJob(t, r.c, aheadID).State == generics.JobStateSucceeded
	})
	require.Equal(t, 1, r.runs("ahead"))
	require.EqualValues(t, 1, getJob(t, r.c, aheadID).Attempt)
}

package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
)

// These tests run batch calls (runBatch) on executions made as a claim makes them
// (newExecution), without a database: the contexts and outcomes of a call are the batch
// goroutine's alone.

func batchQueue(run func(ctx context.Context, es []*Execution) ([]error, []bool, any, []byte)) *queue {
	h := NewBatchHandler("b", 1, KindOptions{Timeout: time.Minute, MaxAttempts: 5, Retry: DefaultRetry}, 1000, -1, run)
	w := &Engine{cfg: Config{HeartbeatDivisor: 3}, m: newMetrics(), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		base: context.Background(), handlers: map[string]*Handler{"b": h}}
	return &queue{w: w, name: "default", active: map[*Execution]struct{}{}}
}

func batchExecs(q *queue, n int) []*Execution {
	es := make([]*Execution, n)
	for i := range es {
		es[i] = q.newExecution(&claimed{JobRow: &generics.JobRow{ID: int64(i + 1), Kind: "b", Attempt: 1, MaxAttempts: 5, Lease: time.Minute}}, false)
	}
	return es
}

// TestBatchCallCostsNoContextPerJob: a batch call whose handler does not ask for its jobs'
// contexts (JobContext) allocates per call, not per job. Before the job contexts were made on
// demand, each job of a call cost its own context, an AfterFunc on its context, a value
// context, a deferred closure and a map entry: about ten allocations per job.
func TestBatchCallCostsNoContextPerJob(t *testing.T) {
	var errs [100]error // the handler's results (all successes), without allocating
	var passed [100]bool
	q := batchQueue(func(_ context.Context, es []*Execution) ([]error, []bool, any, []byte) {
		return errs[:len(es)], passed[:len(es)], nil, nil
	})
	allocs := func(n int) float64 {
		es := batchExecs(q, n)
		return testing.AllocsPerRun(20, func() {
			fins := q.w.runBatch(es)
			if len(fins) != n || fins[n-1].to != toSucceeded {
				t.Fatalf("fins %v", fins)
			}
			for _, e := range es {
				e.batch.Store(nil) // runBatch left it so already; the next run registers again
			}
		})
	}
	one, hundred := allocs(1), allocs(100)
	t.Logf("allocations of a batch call: %v for 1 job, %v for 100", one, hundred)
	require.Less(t, hundred-one, 10.0, "allocations grow with the jobs of a call")
}

// TestBatchContextsEndWithTheJobs: the job contexts and the batch context of a call, now that
// the job contexts are made on demand and a job's end is counted by its cancel:
//   - a job whose context ended while its batch formed is not passed to the handler and ends
//     as its cause says (cancelled);
//   - a job cancelled during the call ends cancelled, whether or not the handler asked for its
//     context, and a context asked for after the cancel is already ended with that cause;
//   - the batch context is not cancelled while a job's context lives, and ends, with the last
//     job's cause, once every job's context has ended;
//   - the other jobs' results are their own.
func TestBatchContextsEndWithTheJobs(t *testing.T) {
	var q *queue
	var es []*Execution
	var seen []int64
	var batchErrBefore, batchCauseAfter error
	var asked, late context.Context
	q = batchQueue(func(ctx context.Context, got []*Execution) ([]error, []bool, any, []byte) {
		for _, e := range got {
			seen = append(seen, e.c.ID)
		}
		asked = JobContext(ctx, got[0].c.JobRow) // job 2's: asked for before its cancel
		got[0].cancel(ErrJobCancelled)           // an operator cancels job 2 (the loop's e.cancel)
		<-asked.Done()                           // (the AfterFunc ends it on its own goroutine)
		got[1].cancel(ErrJobCancelled)           // and job 3, whose context the handler never asked for
		late = JobContext(ctx, got[1].c.JobRow)  // asked for after its cancel
		batchErrBefore = ctx.Err()
		got[2].cancel(ErrWorkerStopping) // the last live job: the batch context ends
		batchCauseAfter = context.Cause(ctx)
		return []error{context.Cause(asked), errors.New("handler saw its job end"), nil}, make([]bool, 3), nil, nil
	})
	es = batchExecs(q, 4)
	es[0].cancel(ErrJobCancelled) // cancelled while its batch formed
	fins := q.w.runBatch(es)

	require.Equal(t, []int64{2, 3, 4}, seen, "job 1, cancelled while forming, is not passed")
	require.Equal(t, toCancelled, fins[0].to)
	require.ErrorIs(t, context.Cause(asked), ErrJobCancelled)
	require.ErrorIs(t, context.Cause(late), ErrJobCancelled, "a job context asked for after the cancel is ended")
	require.NoError(t, batchErrBefore, "the batch context lives while one job's context does")
	require.ErrorIs(t, batchCauseAfter, ErrWorkerStopping, "the batch context ends with the last job's cause")
	require.Equal(t, toCancelled, fins[1].to, "job 2: cancelled (its context was asked for)")
	require.Equal(t, toCancelled, fins[2].to, "job 3: cancelled (its context never was)")
	require.Equal(t, toSucceeded, fins[3].to, "job 4's own result: success")
	for _, e := range es {
		require.Nil(t, e.batch.Load(), "the call is over: no job points at it")
	}
}

// goroutineID is the running goroutine's number (runtime.Stack's header), for tests only.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// waitIdle waits until a goroutine of the process is blocked in fn's select (a stack dump).
func waitIdle(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, fn) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no goroutine waits in %s", fn)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestClaimAndBatchGoroutinesAreReused: the next claim, and the next batch call, run on the
// goroutine the previous one ran on once it waits idle (a new goroutine per claim and per
// batch grew its stack again each time, on the claim's critical path); both end with the loop.
func TestClaimAndBatchGoroutinesAreReused(t *testing.T) {
	var ids []string
	var mu sync.Mutex
	record := func() {
		mu.Lock()
		ids = append(ids, goroutineID())
		mu.Unlock()
	}
	q := batchQueue(func(_ context.Context, es []*Execution) ([]error, []bool, any, []byte) {
		record()
		return make([]error, len(es)), make([]bool, len(es)), nil, nil
	})
	q.done, q.claimRunCh, q.batchRunCh = make(chan struct{}), make(chan func()), make(chan []*Execution)
	q.returnedCh = make(chan handlerResult, 10)

	for range 3 {
		ran := make(chan struct{})
		q.runClaim(func() { record(); close(ran) })
		<-ran
		waitIdle(t, "runClaim.func")
	}
	for range 3 {
		q.startBatch("b", &forming{es: batchExecs(q, 2)})
		<-q.returnedCh
		waitIdle(t, "batchRunner")
	}
	require.Len(t, ids, 6)
	require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids[:3], "claims")
	require.Equal(t, []string{ids[3], ids[3], ids[3]}, ids[3:], "batch calls")
	close(q.done) // the loop returned: the idle goroutines end
	q.w.engWG.Wait()
}

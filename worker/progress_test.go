package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/worker"
)

type progArgs struct {
	Fail bool `json:"fail"`
}

func (progArgs) Kind() string        { return "prog" }
func (progArgs) PayloadVersion() int { return 1 }

// TestProgressRidesOnTheHeartbeat: a thousand Progress calls cost no statement of their own:
// the latest value is written by the heartbeat, at most once per ProgressEvery, then by the
// finish; a failed attempt's output and progress stay in its error entry.
func TestProgressRidesOnTheHeartbeat(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2}}))
	require.NoError(t, err)
	release := make(chan struct{})
	calls := make(chan time.Duration, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[progArgs]) error {
		if job.Args.Fail {
			require.NoError(t, worker.Progress(ctx, 5, 10, "half way"))
			require.NoError(t, worker.SetOutput(ctx, map[string]bool{"partial": true}))
			return worker.Permanent(errors.New("gave up"))
		}
		start := time.Now()
		for i := int64(1); i <= 1000; i++ {
			if err := worker.Progress(ctx, i, 1000, "rows"); err != nil {
				return err
			}
		}
		calls <- time.Since(start)
		<-release
		require.NoError(t, worker.Progress(ctx, 1000, 1000, "done"))
		return worker.SetOutput(ctx, map[string]int{"rows": 1000})
	}, &worker.HandlerOptions{Lease: 30 * time.Second}) // heartbeats every 10 s: progress alone makes them due
	c := newClient(t, pool, w)
	startWorker(t, w)
	hb0 := w.Stats().Heartbeats
	res, err := c.Insert(ctx, progArgs{}, nil)
	require.NoError(t, err)
	spent := <-calls
	var row *generics.JobRow
	waitFor(t, 60*time.Second, "progress 1000/1000 in the row", func() bool {
		row, err = c.Get(ctx, res.Job.ID)
		require.NoError(t, err)
		return row.Progress != nil && row.Progress.Done == 1000
	})
	require.Equal(t, generics.JobStateRunning, row.State)
	require.EqualValues(t, 1000, row.Progress.Total)
	require.Equal(t, "rows", row.Progress.Msg)
	// One heartbeat at the first call, then at most one per ProgressEvery while the calls
	// lasted, and one after them: never one per call.
	hbs := w.Stats().Heartbeats - hb0
	require.LessOrEqual(t, hbs, int64(2+spent/worker.ProgressEvery), "heartbeat statements for 1000 Progress calls in %v", spent)

	close(release)
	row, err = c.Wait(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateSucceeded, row.State)
	require.Equal(t, "done", row.Progress.Msg, "the finish writes the last progress")
	require.JSONEq(t, `{"rows":1000}`, string(row.Output))

	// A failed attempt: its output and progress are kept in its error entry.
	res, err = c.Insert(ctx, progArgs{Fail: true}, nil)
	require.NoError(t, err)
	row, err = c.Wait(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, row.State)
	require.Len(t, row.Errors, 1)
	require.JSONEq(t, `{"partial":true}`, string(row.Errors[0].Output))
	require.NotNil(t, row.Errors[0].Progress)
	require.EqualValues(t, 5, row.Errors[0].Progress.Done)
	require.Equal(t, "half way", row.Errors[0].Progress.Msg)
	require.Nil(t, row.Output, "a failed attempt's output is not the job's")
	require.NotNil(t, row.Progress, "a dead job keeps its last progress")

	require.ErrorIs(t, worker.Progress(ctx, 1, 2, ""), worker.ErrNotInHandler)
}

// TestProgressOfAStaleAttemptIsNotWritten: the claim is taken from under the handler (another
// attempt's token); the progress it reports then is never written, and the heartbeat that
// carried it finds the lease lost.
func TestProgressOfAStaleAttemptIsNotWritten(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 1}}))
	require.NoError(t, err)
	claimed := make(chan int64, 1)
	stolen := make(chan struct{})
	causes := make(chan error, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[progArgs]) error {
		claimed <- job.ID
		<-stolen
		require.NoError(t, worker.Progress(ctx, 1, 2, "stale"))
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	}, &worker.HandlerOptions{Lease: 30 * time.Second})
	c := newClient(t, pool, w)
	startWorker(t, w)
	_, err = c.Insert(ctx, progArgs{}, nil)
	require.NoError(t, err)
	id := <-claimed
	_, err = pool.Exec(ctx, "UPDATE tenure.jobs SET claim_token = gen_random_uuid() WHERE id = $1", id)
	require.NoError(t, err)
	close(stolen)
	require.ErrorIs(t, <-causes, worker.ErrLeaseLost, "the heartbeat carrying the progress found the claim gone")
	var progress []byte
	require.NoError(t, pool.QueryRow(ctx, "SELECT progress FROM tenure.jobs WHERE id = $1", id).Scan(&progress))
	require.Nil(t, progress, "a stale attempt's progress is never written")
}

func TestProgressRefusesHostileValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		done, total int64
		msg         string
	}{{-1, 0, ""}, {0, -1, ""}, {3, 2, ""}, {0, 0, "\xff"}, {0, 0, "a\x00b"}, {0, 0, strings.Repeat("é", worker.MaxProgressMsgChars+1)}} {
		require.ErrorIs(t, worker.CheckProgress(tc.done, tc.total, tc.msg), worker.ErrInvalidProgress, "%+v", tc)
	}
	require.NoError(t, worker.CheckProgress(5, 0, "unknown total"))
	require.NoError(t, worker.CheckProgress(2, 2, "héllo"))
}

func FuzzProgress(f *testing.F) {
	f.Add(int64(1), int64(2), "msg")
	f.Add(int64(-1), int64(0), "\xff")
	f.Add(int64(3), int64(2), "a\x00")
	f.Fuzz(func(t *testing.T, done, total int64, msg string) {
		err := worker.CheckProgress(done, total, msg)
		if err != nil {
			require.ErrorIs(t, err, worker.ErrInvalidProgress)
		}
	})
}

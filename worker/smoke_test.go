package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

func TestSmokeRunsJobsAndRetries(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var ran atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		ran.Add(1)
		return nil
	}, nil)
	var fails atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[failArgs]) error {
		fails.Add(1)
		return errors.New(job.Args.Msg)
	}, &worker.HandlerOptions{MaxAttempts: 3, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	c := newClient(t, pool, w)
	ctx := context.Background()
	var params []jobs.InsertManyParams
	for i := range 100 {
		params = append(params, jobs.InsertManyParams{Args: noopArgs{N: i}})
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	row, err := c.Insert(ctx, failArgs{Msg: "boom"}, nil)
	require.NoError(t, err)
	require.Equal(t, 3, row.Job.MaxAttempts)

	startWorker(t, w)
	waitFor(t, 10*time.Second, "all jobs final", func() bool {
		return countState(t, pool, "succeeded") == 100 && countState(t, pool, "dead") == 1
	})
	require.EqualValues(t, 100, ran.Load())
	require.EqualValues(t, 3, fails.Load())
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateDead, got.State)
	require.Equal(t, "HANDLER_ERROR", got.LastErrorCode)
	require.Len(t, got.Errors, 3)
	require.Equal(t, int64(3), got.Generation)
	require.NoError(t, stopWorker(t, w, 5*time.Second))
	st := w.Stats()
	require.EqualValues(t, 100, st.Succeeded)
	require.EqualValues(t, 2, st.Retried)
	require.EqualValues(t, 1, st.Dead)
	require.Zero(t, st.StaleRejected)
}

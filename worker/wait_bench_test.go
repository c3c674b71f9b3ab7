package worker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// BenchmarkWaitLatency: an idle queue, one job at a time, a waiter (jobs.Client.Wait) on it
// from before its insert; handler return -> Wait's return (the finish, its NOTIFY on the done
// channel, the waiter registry's re-read), woken by NOTIFY (the poll is an hour). Compare with
// BenchmarkPickupLatency (enqueue commit -> handler start) in the same run.
//
// Sub-benchmarks: linger20ms is the default Config.FinishLinger (a lone finish waits up to
// 20 ms for company: part of what a waiter sees), linger0 turns it off. settled-ms is measured
// from the OnOutcome report (after the finish committed) instead of the handler's return.
func BenchmarkWaitLatency(b *testing.B) {
	b.Run("linger20ms", func(b *testing.B) { benchWaitLatency(b, 0) })
	b.Run("linger0", func(b *testing.B) { benchWaitLatency(b, -1) })
}

func benchWaitLatency(b *testing.B, linger time.Duration) {
	pool := benchPool(b)
	settled := make(chan time.Time, 1)
	w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 32}}, FinishLinger: linger,
		OnOutcome: func(worker.Outcome) {
			select {
			case settled <- time.Now():
			default:
			}
		}})
	require.NoError(b, err)
	returned := make(chan time.Time, 1)
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error {
		returned <- time.Now()
		return nil
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(b, err)
	require.NoError(b, w.Start(context.Background()))
	defer func() { _ = stopWorker(b, w, 5*time.Second) }()
	time.Sleep(300 * time.Millisecond) // listener up, claim loop idle
	// Warm the waiter registry (its LISTEN connection) with one job.
	_, _, err = jobs.InsertAndWait[struct{}](context.Background(), c, noopArgs{}, nil)
	require.NoError(b, err)
	<-returned
	<-settled
	var h, hs hist.H
	b.ResetTimer()
	for i := range b.N {
		res, err := c.Insert(context.Background(), noopArgs{N: i}, nil)
		require.NoError(b, err)
		row, err := c.Wait(context.Background(), res.Job.ID)
		waited := time.Now()
		require.NoError(b, err)
		require.Equal(b, generics.JobStateSucceeded, row.State)
		h.Record(waited.Sub(<-returned))
		hs.Record(max(waited.Sub(<-settled), 0))
		time.Sleep(5 * time.Millisecond) // idle between jobs
	}
	b.StopTimer()
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(hs.Quantile(0.5).Microseconds())/1000, "settled-p50-ms")
	b.ReportMetric(float64(hs.Quantile(0.99).Microseconds())/1000, "settled-p99-ms")
}

package worker_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/worker"
)

// BenchmarkFleetBurnDown: 50,000 pre-inserted no-op jobs of one queue burned down by 1, 2 and 4
// workers (one process, each worker with its own engine pool, 100 slots, library defaults, the
// machine's server), each variant on a fresh database, in turn within an iteration. Reports
// jobs/s per variant; the log lines add the process's CPU and the database's statement time and
// commits per 1,000 jobs (pg_stat_database). It measures what the workers of a fleet cost each
// other on one database: the row locks of the queue's head and the commits' WAL flushes (the
// done signal after the commit, docs/design.md).
func BenchmarkFleetBurnDown(b *testing.B) {
	const total = 50000
	fleets := []int{1, 2, 4}
	rates := make([][]float64, len(fleets))
	for range b.N {
		for fi, nw := range fleets {
			b.StopTimer()
			pool := benchPool(b)
			c := newClient(b, pool, nil)
			insertNoops(b, c, total, nil)
			_, err := pool.Exec(context.Background(), "VACUUM ANALYZE tenure.jobs")
			require.NoError(b, err)
			done := make(chan struct{})
			var n atomic.Int64
			ws := make([]*worker.Worker, nw)
			for i := range ws {
				w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
					Queues: map[string]worker.QueueConfig{"default": {Concurrency: 100, Claimers: benchClaimers}},
					OnOutcome: func(worker.Outcome) {
						if n.Add(1) == total {
							close(done)
						}
					}})
				require.NoError(b, err)
				worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
				ws[i] = w
			}
			dbBefore := dbActivity(b, pool)
			cpuBefore := processCPU()
			b.StartTimer()
			start := time.Now()
			for _, w := range ws {
				require.NoError(b, w.Start(context.Background()))
			}
			<-done
			elapsed := time.Since(start)
			b.StopTimer()
			cpu := processCPU() - cpuBefore
			for _, w := range ws {
				require.NoError(b, stopWorker(b, w, 10*time.Second))
				require.Zero(b, w.Stats().StaleRejected)
			}
			db := dbActivity(b, pool).minus(dbBefore)
			rate := float64(total) / elapsed.Seconds()
			rates[fi] = append(rates[fi], rate)
			k := float64(total) / 1000
			b.Logf("%d workers: %d jobs in %v = %.0f jobs/s; per 1k jobs: process CPU %.3fs, db statement time %.3fs, transactions %.0f",
				nw, total, elapsed.Round(time.Millisecond), rate, cpu.Seconds()/k, db.activeMs/1000/k, db.xacts/k)
		}
	}
	for fi, nw := range fleets {
		sum := 0.0
		for _, r := range rates[fi] {
			sum += r
		}
		b.ReportMetric(sum/float64(len(rates[fi])), map[int]string{1: "1w", 2: "2w", 4: "4w"}[nw]+"-jobs/s")
	}
}

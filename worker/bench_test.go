package worker_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

func benchPool(b *testing.B) *pgxpool.Pool {
	return pgtest.NewPoolWith(b, func(c *pgxpool.Config) {
		c.MaxConns = 40
		if os.Getenv("TENURE_BENCH_ASYNC") != "" {
			c.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
		}
	})
}

func insertNoops(b *testing.B, c *jobs.Client, n int, opts *jobs.InsertOpts) {
	b.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		k := min(5000, n-done)
		ps := make([]jobs.InsertManyParams, k)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: noopArgs{N: done + i}, Opts: opts}
		}
		_, err := c.InsertMany(ctx, ps)
		require.NoError(b, err)
		done += k
	}
}

// xactCommits is the database's committed transactions so far (pg_stat_database: what the
// backends have reported).
func xactCommits(b *testing.B, pool *pgxpool.Pool) int64 {
	var n int64
	require.NoError(b, pool.QueryRow(context.Background(), "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()").Scan(&n))
	return n
}

// insertTenants inserts n no-op jobs whose fair keys cycle through tenants keys.
func insertTenants(b *testing.B, c *jobs.Client, n, tenants int) {
	b.Helper()
	for done := 0; done < n; {
		k := min(5000, n-done)
		ps := make([]jobs.InsertManyParams, k)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: noopArgs{N: done + i}, Opts: &jobs.InsertOpts{FairKey: fmt.Sprintf("t%d", (done+i)%tenants)}}
		}
		_, err := c.InsertMany(context.Background(), ps)
		require.NoError(b, err)
		done += k
	}
}

// BenchmarkBurnDown: 100,000 pre-inserted no-op jobs, default settings plus Concurrency,
// time to finish them all. Reports jobs/s. Sub-benchmarks compare fairness policies in the
// same run (the fairness issue's ≤10% overhead budget).
func BenchmarkBurnDown(b *testing.B) {
	const total = 100000
	for _, tc := range []struct {
		name   string
		f      worker.Fairness
		limits []worker.Limit
		// tenants > 0: the jobs carry fair keys t0..t<tenants-1> in turn
		tenants int
		// noRide: completions only through the finishers, never on claims (claim.go)
		noRide bool
	}{
		{"strict", worker.Fairness{}, nil, 0, false},
		{"strict-noride", worker.Fairness{}, nil, 0, true},
		{"aging", worker.Fairness{Aging: &worker.Aging{Step: 5 * time.Minute}}, nil, 0, false},
		{"quota", worker.Fairness{Quotas: map[int]int{jobs.PriorityHigh: 12, jobs.PriorityNormal: 6, jobs.PriorityLow: 2}}, nil, 0, false},
		// Flow control configured but not binding: every claim is a permit claim (permits.go;
		// before issue 28 a limit this large took grant claims), every job enters
		// jobs_limited_idx, no limit ever holds a job back.
		{"strict-limits", worker.Fairness{}, []worker.Limit{{Kind: "noop", MaxRunning: 1_000_000}}, 0, false},
		// A limit above the worker's 100 slots (never binding): the queue claims under permits
		// (permits.go; before them every claim here was exclusive).
		{"strict-limit150", worker.Fairness{}, []worker.Limit{{Kind: "noop", MaxRunning: 150}}, 0, false},
		// Fair share (fairshare.go): one tenant (the claim's round robin has nothing to
		// share), and 100 tenants with 1,000 jobs each.
		{"fair-1tenant", worker.Fairness{FairShare: true}, nil, 1, false},
		{"fair-100tenants", worker.Fairness{FairShare: true}, nil, 100, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var rate float64
			for range b.N {
				b.StopTimer()
				pool := benchPool(b)
				c := newClient(b, pool, nil)
				if tc.tenants > 0 {
					insertTenants(b, c, total, tc.tenants)
				} else {
					insertNoops(b, c, total, nil)
				}
				if x := os.Getenv("TENURE_BENCH_SQL"); x != "" { // experiments: e.g. DROP INDEX ...
					_, err := pool.Exec(context.Background(), x)
					require.NoError(b, err)
				}
				_, err := pool.Exec(context.Background(), "VACUUM ANALYZE tenure.jobs")
				require.NoError(b, err)
				done := make(chan struct{})
				var mu sync.Mutex
				n := 0
				w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
					Queues: map[string]worker.QueueConfig{"default": {Concurrency: 100, Fairness: tc.f, Claimers: benchClaimers, Limits: tc.limits}},
					OnOutcome: func(o worker.Outcome) {
						mu.Lock()
						n++
						if n == total {
							close(done)
						}
						mu.Unlock()
					}})
				require.NoError(b, err)
				worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
				if tc.noRide {
					worker.NoRide(w)
				}
				commits0 := xactCommits(b, pool)
				b.StartTimer()
				start := time.Now()
				require.NoError(b, w.Start(context.Background()))
				<-done
				elapsed := time.Since(start)
				b.StopTimer()
				require.NoError(b, stopWorker(b, w, 10*time.Second))
				// The engine's backends report their counts as they exit (its private pool
				// closed with Stop): every transaction of the run, whoever sent it.
				time.Sleep(time.Second)
				commits := xactCommits(b, pool) - commits0
				st := w.Stats()
				require.Zero(b, st.StaleRejected)
				rate = float64(total) / elapsed.Seconds()
				b.Logf("%s: %d jobs in %v = %.0f jobs/s; claims %d (asked %d, got %d), claim p50 %v p99 %v, finish p50 %v p99 %v; commits %.1f per 1,000 jobs, %d completions on claims",
					tc.name, total, elapsed.Round(time.Millisecond), rate, st.Claims, st.ClaimAsked, st.Claimed, st.ClaimP50, st.ClaimP99, st.FinishP50, st.FinishP99,
					float64(commits)*1000/total, st.FinishedOnClaims)
				b.ReportMetric(float64(commits)*1000/total, "commits/1kjobs")
			}
			b.ReportMetric(rate, "jobs/s")
		})
	}
}

// BenchmarkPickupLatency: an idle queue, one job enqueued at a time; enqueue commit -> handler
// start, woken by NOTIFY.
func BenchmarkPickupLatency(b *testing.B) {
	pool := benchPool(b)
	w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1", Queues: map[string]worker.QueueConfig{"default": {Concurrency: 32}}})
	require.NoError(b, err)
	startedAt := make(chan time.Time, 1)
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error {
		startedAt <- time.Now()
		return nil
	}, nil)
	c := newClient(b, pool, w)
	require.NoError(b, w.Start(context.Background()))
	defer func() { _ = stopWorker(b, w, 5*time.Second) }()
	time.Sleep(300 * time.Millisecond) // listener up, claim loop idle
	var h hist.H
	b.ResetTimer()
	for i := range b.N {
		_, err := c.Insert(context.Background(), noopArgs{N: i}, nil)
		committed := time.Now()
		require.NoError(b, err)
		h.Record((<-startedAt).Sub(committed))
		time.Sleep(5 * time.Millisecond) // idle between jobs: 200 jobs/s at most
	}
	b.StopTimer()
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkClaimWithFinishedRows: the engine's claim statement latency (batch 10) with 1,000,000 finished
// rows in the table.
func BenchmarkClaimWithFinishedRows(b *testing.B) {
	pool := benchPool(b)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at)
		SELECT 'default', 'noop', '{"n":0}', 'succeeded', 1, now(), gen_random_uuid(), 1, now() FROM generate_series(1, 1000000)`)
	require.NoError(b, err)
	c := newClient(b, pool, nil)
	insertNoops(b, c, 20000, nil)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tenure.jobs")
	require.NoError(b, err)
	// The engine's claim: one segment per band, highest first, no watermark.
	sql, _ := plantest.SQL(b, "ClaimOrdered")
	var h hist.H
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		rows, err := pool.Query(ctx, sql, strictArgs(nil, 10, "bench")...)
		require.NoError(b, err)
		rows.Close()
		require.NoError(b, rows.Err())
		h.Record(time.Since(t0))
		if i%1500 == 1499 {
			b.StopTimer()
			_, err := pool.Exec(ctx, "UPDATE tenure.jobs SET state='ready', claim_token=NULL, locked_by=NULL, locked_until=NULL, attempts=0 WHERE state='running'")
			require.NoError(b, err)
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds())/1000, "p99-ms")
}

var benchClaimers = func() int {
	n, _ := strconv.Atoi(os.Getenv("TENURE_BENCH_CLAIMERS"))
	return n
}()

// BenchmarkFewWorkers: 8 handlers that sleep 1 ms over a deep backlog; jobs/s. A claim loop on
// a fixed cooldown would be capped near workers/cooldown; Tenure's is demand-driven.
func BenchmarkFewWorkers(b *testing.B) {
	const total = 20000
	var rate float64
	for range b.N {
		b.StopTimer()
		pool := benchPool(b)
		c := newClient(b, pool, nil)
		insertNoops(b, c, total, nil)
		_, err := pool.Exec(context.Background(), "VACUUM ANALYZE tenure.jobs")
		require.NoError(b, err)
		var mu sync.Mutex
		n := 0
		done := make(chan struct{})
		w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
			Queues: map[string]worker.QueueConfig{"default": {Concurrency: 8, Claimers: benchClaimers}},
			OnOutcome: func(worker.Outcome) {
				mu.Lock()
				if n++; n == total/2 {
					close(done)
				}
				mu.Unlock()
			}})
		require.NoError(b, err)
		worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error {
			time.Sleep(time.Millisecond)
			return nil
		}, nil)
		b.StartTimer()
		start := time.Now()
		require.NoError(b, w.Start(context.Background()))
		<-done
		elapsed := time.Since(start)
		b.StopTimer()
		require.NoError(b, stopWorker(b, w, 10*time.Second))
		st := w.Stats()
		rate = float64(total/2) / elapsed.Seconds()
		b.Logf("few workers: %.0f jobs/s; claims %d (asked %d), claim p50 %v p99 %v", rate, st.Claims, st.ClaimAsked, st.ClaimP50, st.ClaimP99)
	}
	b.ReportMetric(rate, "jobs/s")
}

// BenchmarkSteadyHeldXmin: producers insert batches of 100 while 100 handlers work, for
// TENURE_BENCH_SECONDS (default 30) seconds, with and without a transaction holding back the
// xmin horizon for the whole run. Reports completed jobs/s and the claim statement's p99.
func BenchmarkSteadyHeldXmin(b *testing.B) {
	secs, _ := strconv.Atoi(os.Getenv("TENURE_BENCH_SECONDS"))
	if secs == 0 {
		secs = 30
	}
	for _, held := range []bool{false, true} {
		name := "clean"
		if held {
			name = "held-xmin"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				pool := benchPool(b)
				ctx := context.Background()
				if held {
					tx, err := pool.Begin(ctx)
					require.NoError(b, err)
					_, err = tx.Exec(ctx, "SELECT txid_current()")
					require.NoError(b, err)
					defer tx.Rollback(ctx) //nolint:errcheck
				}
				c := newClient(b, pool, nil)
				var done atomic.Int64
				w, err := worker.New(pool, &worker.Config{Logger: testLogger(),
					AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
					Queues:             map[string]worker.QueueConfig{"default": {Concurrency: 100}},
					OnOutcome:          func(worker.Outcome) { done.Add(1) }})
				require.NoError(b, err)
				worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
				require.NoError(b, w.Start(ctx))
				runCtx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
				var wg sync.WaitGroup
				for range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ps := make([]jobs.InsertManyParams, 100)
						for i := range ps {
							ps[i] = jobs.InsertManyParams{Args: noopArgs{N: i}}
						}
						for runCtx.Err() == nil {
							if _, err := c.InsertMany(ctx, ps); err != nil {
								return
							}
							// keep a bounded backlog: wait while 2,000 jobs are pending
							for runCtx.Err() == nil && w.Stats().Claimed+2000 < insertedSoFar(pool) {
								time.Sleep(2 * time.Millisecond)
							}
						}
					}()
				}
				start := time.Now()
				<-runCtx.Done()
				cancel()
				wg.Wait()
				elapsed := time.Since(start)
				n := done.Load()
				require.NoError(b, stopWorker(b, w, 10*time.Second))
				st := w.Stats()
				var dead int64
				_ = pool.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs'").Scan(&dead)
				b.Logf("%s: %.0f jobs/s completed over %v; claim statement p50 %v p99 %v; finish p99 %v; dead tuples %d",
					name, float64(n)/elapsed.Seconds(), elapsed.Round(time.Second), st.ClaimP50, st.ClaimP99, st.FinishP99, dead)
				b.ReportMetric(float64(n)/elapsed.Seconds(), "jobs/s")
				b.ReportMetric(float64(st.ClaimP99.Microseconds())/1000, "claim-p99-ms")
			}
		})
	}
}

func insertedSoFar(pool *pgxpool.Pool) int64 {
	var n int64
	_ = pool.QueryRow(context.Background(), "SELECT coalesce(max(id), 0) FROM tenure.jobs").Scan(&n)
	return n
}

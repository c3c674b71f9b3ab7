package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// The tenant benchmark (issue 16, fair share): tenant A has heavyJobs queued before the run
// starts; tenants B..K each offer lightRate jobs/s, all in one queue and priority band. The
// run lasts until A's backlog is done (or -tenant-timeout). Under strict priority (oldest
// first) the light tenants' jobs wait behind A's whole backlog; with Fairness.FairShare every
// tenant with ready jobs gets one start per round. Reported: the light tenants' wait (due ->
// claimed) p50/p95/p99 while A was backlogged, and A's drain rate (its jobs/s, against the
// same run without fair share).

const (
	lightTenants = 10
	lightRate    = 2.0 // jobs/s per light tenant
)

type tenantResult struct {
	Mode        string  `json:"mode"`
	HeavyJobs   int     `json:"heavy_jobs"`
	HeavyDoneS  float64 `json:"heavy_drained_s"`
	HeavyRate   float64 `json:"heavy_jobs_per_s"`
	LightJobs   int64   `json:"light_jobs_started"`
	LightP50S   float64 `json:"light_wait_p50_s"`
	LightP95S   float64 `json:"light_wait_p95_s"`
	LightP99S   float64 `json:"light_wait_p99_s"`
	LightMaxS   float64 `json:"light_wait_max_s"`
	Concurrency int     `json:"concurrency"`
	HandlerMs   float64 `json:"handler_ms"`
}

func runTenants(ctx context.Context, adminURL string, fair bool, heavyJobs int, timeout time.Duration) (tenantResult, error) {
	mode := map[bool]string{false: "strict (oldest first)", true: "FairShare"}[fair]
	pool, _, cleanup, err := freshDB(ctx, adminURL, fmt.Sprintf("tenure_fairness_tenants_%v_%d", fair, os.Getpid()), 16)
	if err != nil {
		return tenantResult{}, err
	}
	defer cleanup()

	const conc = 40
	const handler = 20 * time.Millisecond // capacity 2,000 jobs/s: the handlers, not the claims, bound it
	var heavyDone atomic.Int64
	var lightStarted atomic.Int64
	lightWaits := &hist.H{}
	var maxWait atomic.Int64
	w, err := worker.New(pool, &worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: conc, Fairness: worker.Fairness{FairShare: fair}}},
	})
	if err != nil {
		return tenantResult{}, err
	}
	drained := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[work]) error {
		if job.Metadata[jobs.FairKeyMetadata] != "A" {
			d := job.AttemptedAt.Sub(job.RunAt)
			lightWaits.Record(d)
			lightStarted.Add(1)
			for {
				cur := maxWait.Load()
				if int64(d) <= cur || maxWait.CompareAndSwap(cur, int64(d)) {
					break
				}
			}
		}
		time.Sleep(handler)
		if job.Metadata[jobs.FairKeyMetadata] == "A" && heavyDone.Add(1) == int64(heavyJobs) {
			close(drained)
		}
		return nil
	}, nil)
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		return tenantResult{}, err
	}
	fmt.Fprintf(os.Stderr, "== tenants, %s: queueing %d jobs of tenant A\n", mode, heavyJobs)
	for left := heavyJobs; left > 0; {
		n := min(left, 5000)
		ps := make([]jobs.InsertManyParams, n)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: work{N: i}, Opts: &jobs.InsertOpts{FairKey: "A"}}
		}
		if _, err := client.InsertMany(ctx, ps); err != nil {
			return tenantResult{}, err
		}
		left -= n
	}
	if err := w.Start(ctx); err != nil {
		return tenantResult{}, err
	}
	start := time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var produceErr error
	wg.Add(1)
	go func() { // tenants B..K: lightRate jobs/s each, one insert per job, in 10 ms ticks
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var owed float64
		next := 0
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			owed += lightTenants * lightRate / 100
			for ; owed >= 1; owed-- {
				key := string(rune('B' + next%lightTenants))
				next++
				if _, err := client.Insert(ctx, work{N: next}, &jobs.InsertOpts{FairKey: key}); err != nil {
					produceErr = err
					return
				}
			}
		}
	}()
	select {
	case <-drained:
	case <-time.After(timeout):
	}
	heavyElapsed := time.Since(start)
	cancel()
	wg.Wait()
	// The light jobs inserted before the end: let them start, so a starved job's wait counts.
	waitUntil := time.Now().Add(10 * time.Second)
	for time.Now().Before(waitUntil) {
		var ready int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND metadata ->> 'tenure.fair_key' <> 'A'`).Scan(&ready); err != nil || ready == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 10*time.Second)
	defer stopCancel()
	_ = w.Stop(stopCtx)
	if produceErr != nil {
		return tenantResult{}, produceErr
	}
	r := tenantResult{Mode: mode, HeavyJobs: heavyJobs, HeavyDoneS: heavyElapsed.Seconds(),
		HeavyRate: float64(heavyDone.Load()) / heavyElapsed.Seconds(), LightJobs: lightStarted.Load(),
		LightP50S: lightWaits.Quantile(0.5).Seconds(), LightP95S: lightWaits.Quantile(0.95).Seconds(),
		LightP99S: lightWaits.Quantile(0.99).Seconds(), LightMaxS: time.Duration(maxWait.Load()).Seconds(),
		Concurrency: conc, HandlerMs: float64(handler) / float64(time.Millisecond)}
	fmt.Fprintf(os.Stderr, "   A drained in %.1f s (%.0f jobs/s); light waits p99 %.3f s\n", r.HeavyDoneS, r.HeavyRate, r.LightP99S)
	return r, nil
}

func printTenants(w io.Writer, rs []tenantResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nTenant fairness: tenant A has %d jobs queued, tenants B..K offer %g jobs/s each (%g/s in all), one queue and band; %d slots, %g ms handlers; run until A is drained\n\n",
		rs[0].HeavyJobs, lightRate, lightTenants*lightRate, rs[0].Concurrency, rs[0].HandlerMs)
	fmt.Fprintln(w, "| mode | A drained in (s) | A jobs/s | B..K jobs started | B..K wait p50 (s) | p95 (s) | p99 (s) | max (s) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		fmt.Fprintf(w, "| %s | %.1f | %.0f | %d | %.3f | %.3f | %.3f | %.3f |\n",
			r.Mode, r.HeavyDoneS, r.HeavyRate, r.LightJobs, r.LightP50S, r.LightP95S, r.LightP99S, r.LightMaxS)
	}
	if len(rs) == 2 && rs[0].HeavyRate > 0 {
		fmt.Fprintf(w, "\nA's drain rate with FairShare: %.0f%% of strict's (the light tenants take %g jobs/s of the capacity in both).\n",
			100*rs[1].HeavyRate/rs[0].HeavyRate, lightTenants*lightRate)
	}
}

// Command fairness (bench/cmd/fairness) is the starvation benchmark of Tenure's fairness policies
// (make bench-fairness).
//
// It reproduces an overloaded queue: high priority arrives at 50 jobs/s, normal at 20 jobs/s,
// and the workers complete 60 jobs/s, so the system is 10 jobs/s short. Time is compressed by
// -scale (default 10: 500 + 200 jobs/s offered, 600 jobs/s of capacity, aging steps and
// deadlines in seconds instead of minutes). Each policy (strict, aging, quota, deadline) runs
// for -duration on a fresh database against the real claim statements, and the command
// reports per priority: jobs done, the oldest ready age (at the end and the maximum sampled),
// and the queue wait (due -> claimed, database clock) p50/p95/p99.
//
// Strict priority must show normal starving (its oldest age grows for the whole run); aging,
// quota and deadline must keep normal's oldest ready age under the bound their configuration
// promises, which the command checks and prints.
//
// Then the tenant benchmark (tenants.go, -tenant-backlog): one tenant's backlog against ten
// light tenants, strict priority against Fairness.FairShare.
//
// Then the flow-control proofs (limits.go, -limits): a global concurrency limit across 4 worker
// processes, one job at a time per key under SIGKILLs, and a rate limit offered 5× its rate.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/internal/pgserver"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type work struct {
	N int `json:"n"`
}

func (work) Kind() string        { return "work" }
func (work) PayloadVersion() int { return 1 }

type policy struct {
	name string
	f    worker.Fairness
	// bound is the promised limit on normal's oldest ready age (0 = none promised).
	bound time.Duration
	why   string
}

type bandResult struct {
	Priority      int     `json:"priority"`
	Done          int64   `json:"done"`
	OldestEndS    float64 `json:"oldest_ready_age_end_s"`
	OldestMaxS    float64 `json:"oldest_ready_age_max_s"`
	WaitP50S      float64 `json:"wait_p50_s"`
	WaitP95S      float64 `json:"wait_p95_s"`
	WaitP99S      float64 `json:"wait_p99_s"`
	ageSamples    []float64
	waits         *hist.H
	done          int64
	oldestEndTime time.Duration
}

type result struct {
	Policy     string        `json:"policy"`
	Why        string        `json:"bound_reason,omitempty"`
	Config     string        `json:"config"`
	BoundS     float64       `json:"normal_bound_s"`
	BoundHeld  *bool         `json:"normal_bound_held,omitempty"`
	Bands      []*bandResult `json:"bands"`
	NormalAges []float64     `json:"normal_oldest_age_samples_s"`
}

func main() {
	if spec := os.Getenv(limitsChildEnv); spec != "" {
		os.Exit(limitsChild(spec))
	}
	var (
		scale    = flag.Float64("scale", 10, "time compression: rates multiplied, steps divided by this")
		duration = flag.Duration("duration", 60*time.Second, "run time per policy")
		only     = flag.String("policies", "strict,aging,quota,deadline", "comma-separated policies to run")
		out      = flag.String("out", "", "also write the results as JSON to this file")
		tenants  = flag.Int("tenant-backlog", 100000, "tenant benchmark: jobs queued for tenant A (0 = skip the tenant benchmark)")
		tenantTO = flag.Duration("tenant-timeout", 3*time.Minute, "tenant benchmark: stop a mode after this long even if A is not drained")
		limits   = flag.Bool("limits", true, "run the flow-control benchmarks (global limit, limit 1 per key under SIGKILL, rate limit)")
		limitsD  = flag.Duration("limits-duration", 30*time.Second, "flow-control benchmarks: measured time per mode")
		limitsN  = flag.Int("limits-rounds", 2, "flow-control benchmarks: rounds of the interleaved global-limit modes")
		limitsR  = flag.Int("limits-rate", 50, "flow-control benchmarks: the rate limit's starts per second")
		limitsG  = flag.String("limits-global", defaultGlobalModes, "flow-control benchmarks: the global benchmark's MaxRunning values, in order each round (0 = no limit)")
		limitsGO = flag.Bool("limits-global-only", false, "flow-control benchmarks: only the global-limit modes (skip the per-key and rate proofs)")
		limitsRD = flag.Duration("limits-rate-duration", 60*time.Second, "flow-control benchmarks: how long the rate limit is offered 5× its rate")
	)
	flag.Parse()
	if *only == "" {
		*only = ","
	}
	lim := limitsOpts{enabled: *limits, duration: *limitsD, rateDuration: *limitsRD, globalModes: *limitsG, globalOnly: *limitsGO, rounds: *limitsN, rate: *limitsR}
	if err := run(*scale, *duration, strings.Split(*only, ","), *out, *tenants, *tenantTO, lim); err != nil {
		fmt.Fprintln(os.Stderr, "fairness:", err)
		os.Exit(1)
	}
}

type limitsOpts struct {
	enabled      bool
	duration     time.Duration
	rateDuration time.Duration
	globalModes  string
	globalOnly   bool
	rounds       int
	rate         int
}

func run(scale float64, duration time.Duration, names []string, out string, heavy int, tenantTimeout time.Duration, lim limitsOpts) error {
	ctx := context.Background()
	srv, err := pgserver.Ensure(ctx, func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) })
	if err != nil {
		return err
	}
	defer srv.Stop()

	// Aging and deadline settings in uncompressed time: +1 level per 20 s, deadline 30 s
	// (2 s and 3 s at the default scale 10), short enough to show their bound within a run.
	step := time.Duration(20 * float64(time.Second) / scale)
	deadline := time.Duration(30 * float64(time.Second) / scale)
	policies := map[string]policy{
		"strict": {name: "strict", f: worker.Fairness{}},
		"aging": {name: "aging", f: worker.Fairness{Aging: &worker.Aging{Step: step, Ceiling: jobs.PriorityHigh}},
			bound: step + 2*time.Second,
			why:   fmt.Sprintf("normal reaches the ceiling (high) after one step (%v) and then goes first; promoted normals (20/s·scale) drain well within capacity: bound = step + 2 s", step)},
		"quota": {name: "quota", f: worker.Fairness{Quotas: map[int]int{jobs.PriorityHigh: 1, jobs.PriorityNormal: 1}},
			bound: 2 * time.Second,
			why:   "normal's share is 50% of 60/s = 30/s > its 20/s arrivals (its unused share flows to high): its backlog never grows; bound = 2 s"},
		"deadline": {name: "deadline", f: worker.Fairness{Deadline: deadline},
			why: fmt.Sprintf("jobs older than %v go first, oldest first across bands; under an overload of the whole queue every band passes the deadline, so this is FIFO among overdue jobs: it caps no band's age (no bound promised), it only stops strict starvation", deadline)},
	}
	var results []result
	for _, n := range names {
		if strings.TrimSpace(n) == "" {
			continue
		}
		p, ok := policies[strings.TrimSpace(n)]
		if !ok {
			return fmt.Errorf("unknown policy %q", n)
		}
		fmt.Fprintf(os.Stderr, "== %s: %v\n", p.name, duration)
		r, err := runPolicy(ctx, srv.URL, p, scale, duration)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		results = append(results, r)
	}
	var tenantResults []tenantResult
	if heavy > 0 {
		for _, fair := range []bool{false, true} {
			r, err := runTenants(ctx, srv.URL, fair, heavy, tenantTimeout)
			if err != nil {
				return fmt.Errorf("tenants: %w", err)
			}
			tenantResults = append(tenantResults, r)
		}
	}
	var limitsRes *limitsResult
	if lim.enabled {
		limitsRes, err = runLimits(ctx, srv.URL, lim.duration, lim.rateDuration, lim.rounds, lim.rate, lim.globalModes, lim.globalOnly)
		if err != nil {
			return fmt.Errorf("limits: %w", err)
		}
	}
	if len(results) > 0 {
		printTable(os.Stdout, results, scale, duration)
	}
	printTenants(os.Stdout, tenantResults)
	printLimits(os.Stdout, limitsRes)
	if out != "" {
		raw, _ := json.MarshalIndent(map[string]any{"date": time.Now().UTC().Format(time.RFC3339), "scale": scale,
			"duration_s": duration.Seconds(), "results": results, "tenants": tenantResults, "limits": limitsRes}, "", "  ")
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			return err
		}
	}
	for _, r := range results {
		if r.BoundHeld != nil && !*r.BoundHeld {
			return fmt.Errorf("%s: normal's oldest ready age broke its bound", r.Policy)
		}
	}
	return nil
}

func runPolicy(ctx context.Context, adminURL string, p policy, scale float64, duration time.Duration) (result, error) {
	pool, _, cleanup, err := freshDB(ctx, adminURL, fmt.Sprintf("tenure_fairness_%s_%d", p.name, os.Getpid()), 16)
	if err != nil {
		return result{}, err
	}
	defer cleanup()

	// Capacity: 60 jobs/s · scale, from Concurrency handlers that each take conc/capacity
	// (many slots with long handlers, so the engine's per-job overhead, a few milliseconds
	// of claim round trip per slot, costs under 5% of the nominal capacity).
	capacity := 60 * scale
	conc := 60
	workTime := time.Duration(float64(conc) / capacity * float64(time.Second))
	bands := map[int]*bandResult{
		jobs.PriorityHigh:   {Priority: jobs.PriorityHigh, waits: &hist.H{}},
		jobs.PriorityNormal: {Priority: jobs.PriorityNormal, waits: &hist.H{}},
	}
	var mu sync.Mutex
	w, err := worker.New(pool, &worker.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: conc, Fairness: p.f}},
	})
	if err != nil {
		return result{}, err
	}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[work]) error {
		b := bands[job.Priority]
		b.waits.Record(job.AttemptedAt.Sub(job.RunAt))
		time.Sleep(workTime)
		mu.Lock()
		b.done++
		mu.Unlock()
		return nil
	}, nil)
	client, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	if err != nil {
		return result{}, err
	}
	if err := w.Start(ctx); err != nil {
		return result{}, err
	}

	runCtx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	var produceErr error
	go func() { // producer: 50/s high + 20/s normal, times scale, in 10 ms ticks
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var owedHigh, owedNormal float64
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			owedHigh += 50 * scale / 100
			owedNormal += 20 * scale / 100
			var ps []jobs.InsertManyParams
			for ; owedHigh >= 1; owedHigh-- {
				ps = append(ps, jobs.InsertManyParams{Args: work{}, Opts: &jobs.InsertOpts{Priority: jobs.PriorityHigh}})
			}
			for ; owedNormal >= 1; owedNormal-- {
				ps = append(ps, jobs.InsertManyParams{Args: work{}, Opts: &jobs.InsertOpts{Priority: jobs.PriorityNormal}})
			}
			if _, err := client.InsertMany(ctx, ps); err != nil {
				produceErr = err
				return
			}
		}
	}()
	var normalAges []float64
	go func() { // sampler: oldest ready age per priority, once a second, on the database clock
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			ages, err := oldestAges(ctx, pool)
			if err != nil {
				continue
			}
			for prio, b := range bands {
				b.ageSamples = append(b.ageSamples, ages[prio])
			}
			normalAges = append(normalAges, ages[jobs.PriorityNormal])
			fmt.Fprintf(os.Stderr, "  t=%3ds oldest ready age: high %6.2fs normal %6.2fs\n",
				len(normalAges), ages[jobs.PriorityHigh], ages[jobs.PriorityNormal])
		}
	}()
	wg.Wait()
	end, err := oldestAges(ctx, pool)
	if err != nil {
		return result{}, err
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 5*time.Second)
	defer stopCancel()
	_ = w.Stop(stopCtx)
	if produceErr != nil {
		return result{}, produceErr
	}
	r := result{Policy: p.name, Why: p.why, Config: describe(p.f), BoundS: p.bound.Seconds(), NormalAges: normalAges}
	for _, prio := range []int{jobs.PriorityHigh, jobs.PriorityNormal} {
		b := bands[prio]
		b.Done = b.done
		b.OldestEndS = end[prio]
		for _, a := range b.ageSamples {
			b.OldestMaxS = max(b.OldestMaxS, a)
		}
		b.OldestMaxS = max(b.OldestMaxS, b.OldestEndS)
		b.WaitP50S, b.WaitP95S, b.WaitP99S = b.waits.Quantile(0.5).Seconds(), b.waits.Quantile(0.95).Seconds(), b.waits.Quantile(0.99).Seconds()
		r.Bands = append(r.Bands, b)
	}
	if p.bound > 0 {
		held := bands[jobs.PriorityNormal].OldestMaxS <= p.bound.Seconds()
		r.BoundHeld = &held
	}
	return r, nil
}

func oldestAges(ctx context.Context, pool *pgxpool.Pool) (map[int]float64, error) {
	st, err := jobs.NewClient(pool, nil)
	if err != nil {
		return nil, err
	}
	s, err := st.Stats(ctx, time.Second)
	if err != nil {
		return nil, err
	}
	out := map[int]float64{}
	for _, b := range s.Bands {
		out[b.Priority] = b.OldestReadyAge.Seconds()
	}
	return out, nil
}

func describe(f worker.Fairness) string {
	switch {
	case f.Aging != nil:
		return fmt.Sprintf("Aging{Step: %v, Ceiling: %d (high)}", f.Aging.Step, f.Aging.Ceiling)
	case len(f.Quotas) > 0:
		keys := make([]int, 0, len(f.Quotas))
		for k := range f.Quotas {
			keys = append(keys, k)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(keys)))
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%d: %d", k, f.Quotas[k]))
		}
		return "Quotas{" + strings.Join(parts, ", ") + "}"
	case f.Deadline > 0:
		return fmt.Sprintf("Deadline: %v", f.Deadline)
	}
	return "strict priority"
}

func printTable(w io.Writer, rs []result, scale float64, d time.Duration) {
	fmt.Fprintf(w, "Starvation benchmark: high 50/s + normal 20/s offered, 60/s capacity (×%g time compression: %g + %g offered, %g capacity), %v per policy\n\n",
		scale, 50*scale, 20*scale, 60*scale, d)
	fmt.Fprintln(w, "| policy | config | priority | done | oldest ready age at end (s) | max oldest age (s) | wait p50 (s) | wait p95 (s) | wait p99 (s) | normal bound |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rs {
		for _, b := range r.Bands {
			name := map[int]string{jobs.PriorityHigh: "high", jobs.PriorityNormal: "normal"}[b.Priority]
			bound := ""
			if b.Priority == jobs.PriorityNormal {
				switch {
				case r.BoundHeld == nil && r.Policy == "strict":
					bound = "none (starves)"
				case r.BoundHeld == nil:
					bound = "none promised"
				case *r.BoundHeld:
					bound = fmt.Sprintf("≤ %.1f s: held", r.BoundS)
				default:
					bound = fmt.Sprintf("≤ %.1f s: BROKEN", r.BoundS)
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f | %.2f | %.3f | %.3f | %.3f | %s |\n",
				r.Policy, r.Config, name, b.Done, b.OldestEndS, b.OldestMaxS, b.WaitP50S, b.WaitP95S, b.WaitP99S, bound)
		}
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if r.Why != "" {
			fmt.Fprintf(w, "- %s: %s\n", r.Policy, r.Why)
		}
	}
}

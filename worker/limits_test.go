package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// limArgs is the kind the flow-control tests limit; its Key is the job's concurrency key.
type limArgs struct {
	Key   string        `json:"key"`
	Sleep time.Duration `json:"sleep"`
	N     int           `json:"n"`
}

func (limArgs) Kind() string             { return "lim" }
func (limArgs) PayloadVersion() int      { return 1 }
func (a limArgs) ConcurrencyKey() string { return a.Key }

// extraPool opens another pool on the test database: a worker on its own connections, as
// if it ran in another process.
func extraPool(t testing.TB, pool *pgxpool.Pool, conns int32) *pgxpool.Pool {
	t.Helper()
	cfg := pool.Config().Copy()
	cfg.MaxConns = conns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// maxTracker keeps the highest value it was shown.
type maxTracker struct{ v atomic.Int64 }

func (m *maxTracker) see(n int64) {
	for {
		cur := m.v.Load()
		if n <= cur || m.v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// sampleRunning samples, every 10 ms until stop is closed, the running and leased jobs of
// kind lim, overall and for the busiest concurrency key.
func sampleRunning(t testing.TB, pool *pgxpool.Pool, stop <-chan struct{}) (total, perKey *maxTracker, samples *atomic.Int64, done <-chan struct{}) {
	return sampleKind(pool, "lim", stop)
}

// sampleKind is sampleRunning for any kind.
func sampleKind(pool *pgxpool.Pool, kind string, stop <-chan struct{}) (total, perKey *maxTracker, samples *atomic.Int64, done <-chan struct{}) {
	total, perKey, samples = &maxTracker{}, &maxTracker{}, &atomic.Int64{}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var all, key int64
			err := pool.QueryRow(context.Background(), `
				SELECT coalesce(sum(n), 0)::bigint, coalesce(max(n), 0)::bigint FROM (
					SELECT count(*) AS n FROM tenure.jobs
					WHERE kind = $1 AND state = 'running' AND locked_until > now()
					GROUP BY metadata ->> 'tenure.concurrency_key') g`, kind).Scan(&all, &key)
			if err != nil {
				continue
			}
			samples.Add(1)
			total.see(all)
			perKey.see(key)
		}
	}()
	return total, perKey, samples, ch
}

// limRun is what runLimited saw.
type limRun struct {
	elapsed                      time.Duration
	handlerMax, handlerKeyMax    int64
	sampledMax, sampledKeyMax    int64
	samples                      int64
	limitedClaims, emptyClaims   int64
	stripedClaims                int64
	permitAllocations            int64
	workersStats                 []worker.Stats
	jobsPerSecond                float64
	distinctConcurrentKeysAtOnce int64
}

// runLimitedTune, when set, adjusts every runLimited worker's configuration.
var runLimitedTune func(*worker.Config)

// runLimited runs n lim jobs (keys cycling over keys, each sleeping sleep) on workers workers
// of slots slots each, with limits, and returns the elapsed time and the maxima seen by the
// handlers (overall and per key) and by the sampler.
func runLimited(t testing.TB, pool *pgxpool.Pool, workers, slots, n int, keys []string, sleep time.Duration, limits []worker.Limit) limRun {
	t.Helper()
	return runLimitedHeld(t, pool, workers, slots, n, keys, sleep, limits, 0)
}

// runLimitedHeld is runLimited whose handlers, when hold > 0, wait until hold of them have run
// at once (or 60 s, a liveness bound) before their sleep: the limit is then reached however
// slowly a loaded machine claims, and the claims that follow while it is full are held back.
func runLimitedHeld(t testing.TB, pool *pgxpool.Pool, workers, slots, n int, keys []string, sleep time.Duration, limits []worker.Limit, hold int64) limRun {
	t.Helper()
	ctx := context.Background()
	held := make(chan struct{})
	var heldOnce sync.Once
	if hold > 0 {
		timer := time.AfterFunc(60*time.Second, func() { heldOnce.Do(func() { close(held) }) })
		t.Cleanup(func() { timer.Stop() })
	} else {
		close(held)
	}
	var cur atomic.Int64
	hMax, keyMax, keysAtOnce := &maxTracker{}, &maxTracker{}, &maxTracker{}
	var mu sync.Mutex
	perKey := map[string]int64{}
	var finished atomic.Int64
	done := make(chan struct{})
	var ws []*worker.Worker
	for i := range workers {
		p := extraPool(t, pool, int32(slots+2))
		cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: slots, Limits: limits}})
		if runLimitedTune != nil {
			runLimitedTune(cfg)
		}
		cfg.ID = fmt.Sprintf("lim-worker-%d", i)
		cfg.OnOutcome = func(o worker.Outcome) {
			if o.Err == nil && finished.Add(1) == int64(n) {
				close(done)
			}
		}
		w, err := worker.New(p, cfg)
		require.NoError(t, err)
		worker.MustRegister(w, func(ctx context.Context, j *generics.Job[limArgs]) error {
			now := cur.Add(1)
			hMax.see(now)
			if hold > 0 && now >= hold {
				heldOnce.Do(func() { close(held) })
			}
			mu.Lock()
			perKey[j.Args.Key]++
			keyMax.see(perKey[j.Args.Key])
			busy := int64(0)
			for _, v := range perKey {
				if v > 0 {
					busy++
				}
			}
			keysAtOnce.see(busy)
			mu.Unlock()
			<-held
			time.Sleep(sleep)
			mu.Lock()
			perKey[j.Args.Key]--
			mu.Unlock()
			cur.Add(-1)
			return nil
		}, nil)
		ws = append(ws, w)
	}
	c := newClient(t, pool, ws[0])
	params := make([]jobs.InsertManyParams, n)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: limArgs{Key: keys[i%len(keys)], N: i}}
	}
	_, err := c.InsertMany(ctx, params)
	require.NoError(t, err)

	stop := make(chan struct{})
	sTotal, sKey, samples, sDone := sampleRunning(t, pool, stop)
	start := time.Now()
	for _, w := range ws {
		startWorker(t, w)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute): // a liveness bound, not a pace: a loaded machine is slow
		t.Fatalf("only %d of %d jobs finished", finished.Load(), n)
	}
	elapsed := time.Since(start)
	close(stop)
	<-sDone
	r := limRun{elapsed: elapsed, handlerMax: hMax.v.Load(), handlerKeyMax: keyMax.v.Load(),
		sampledMax: sTotal.v.Load(), sampledKeyMax: sKey.v.Load(), samples: samples.Load(),
		jobsPerSecond: float64(n) / elapsed.Seconds(), distinctConcurrentKeysAtOnce: keysAtOnce.v.Load()}
	for _, w := range ws {
		require.NoError(t, stopWorker(t, w, 10*time.Second))
		st := w.Stats()
		r.limitedClaims += st.LimitedClaims
		r.stripedClaims += st.StripedClaims
		r.permitAllocations += st.PermitAllocations
		r.emptyClaims += st.EmptyClaims
		r.workersStats = append(r.workersStats, st)
		require.Zero(t, st.StaleRejected)
	}
	return r
}

// TestLimitGlobalAcrossWorkers: four workers on pools of their own, 10 slots each (40), a
// limit of 5 running jobs of the kind: neither the handlers nor a sampler of the table ever
// see more than 5, and the limit is used (5 reached: the first handlers wait until it is, so a
// slow machine reaches it too).
func TestLimitGlobalAcrossWorkers(t *testing.T) {
	pool := pgtest.NewPool(t)
	const limit, n = 5, 300
	sleep := 10 * time.Millisecond
	r := runLimitedHeld(t, pool, 4, 10, n, []string{"a", "b", "c"}, sleep, []worker.Limit{{Kind: "lim", MaxRunning: limit}}, limit)
	t.Logf("limit %d: %d jobs of %v in %v = %.0f jobs/s (ideal %d/%v = %.0f jobs/s); max running: handlers %d, sampled %d (%d samples); limited claims %d",
		limit, n, sleep, r.elapsed.Round(time.Millisecond), r.jobsPerSecond, limit, sleep, float64(limit)/sleep.Seconds(),
		r.handlerMax, r.sampledMax, r.samples, r.limitedClaims)
	require.LessOrEqual(t, r.handlerMax, int64(limit), "handlers ran more than the limit at once")
	require.LessOrEqual(t, r.sampledMax, int64(limit), "the table showed more running leased jobs than the limit")
	require.Equal(t, int64(limit), r.handlerMax, "the limit was never reached (the first handlers wait for it)")
	require.Positive(t, r.samples)
	require.Positive(t, r.limitedClaims)
	if testing.Short() {
		return
	}
	// The same jobs on one unlimited worker of 5 slots: what 5 at a time costs without limits.
	pool2 := pgtest.NewPool(t)
	b := runLimited(t, pool2, 1, limit, n, []string{"a", "b", "c"}, sleep, nil)
	t.Logf("unlimited, 1 worker x %d slots: %v = %.0f jobs/s; limited run: %.0f%% of it", limit, b.elapsed.Round(time.Millisecond), b.jobsPerSecond, 100*r.jobsPerSecond/b.jobsPerSecond)
}

// TestLimitStripedNearTheLimit: a limit large enough for striped claims (parallel, each
// keeping room for the stripes it cannot see), approached and held by 4 workers with more
// slots than the limit: the claims switch between striped and exclusive and the limit holds.
// The first handlers wait until the limit is reached, so it binds however slow the machine.
// A per-key limit on a kind the test never inserts (large, so it does not lower the claims'
// smallest room) keeps the queue on the counted paths (a
// queue whose limits are all plain concurrency limits of at most 1,000 claims under permits:
// TestLimitPermitsNearTheLimit).
func TestLimitStripedNearTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("800 handler slots, ~2 s")
	}
	pool := pgtest.NewPool(t)
	const limit, n = 600, 3000
	r := runLimitedHeld(t, pool, 4, 200, n, []string{"a", "b", "c"}, 100*time.Millisecond,
		[]worker.Limit{{Kind: "lim", MaxRunning: limit}, {Kind: "absent", PerKey: true, MaxRunning: 100_000}}, limit)
	t.Logf("limit %d, 4 workers x 200 slots: %d jobs of 100ms in %v = %.0f jobs/s (ideal %d/100ms = %d jobs/s); max running: handlers %d, sampled %d (%d samples); limited claims %d, striped claims %d",
		limit, n, r.elapsed.Round(time.Millisecond), r.jobsPerSecond, limit, limit*10, r.handlerMax, r.sampledMax, r.samples, r.limitedClaims, r.stripedClaims)
	require.LessOrEqual(t, r.handlerMax, int64(limit))
	require.LessOrEqual(t, r.sampledMax, int64(limit))
	require.Positive(t, r.stripedClaims, "no claim ran striped")
	require.Positive(t, r.limitedClaims, "the limit never bound")
}

// TestLimitPermitsLargeLimit: a concurrency limit above 1,000 (1,500, 4 workers x 500 slots)
// claims under permits (until issue 28 it took the counted paths with grants, retired since):
// neither the handlers nor the table ever show more than the limit, the limit binds, no claim is
// striped and nothing is written to the retired grant rows.
func TestLimitPermitsLargeLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 handler slots, ~4 s")
	}
	pool := pgtest.NewPool(t)
	const limit, n = 1500, 6000
	r := runLimitedHeld(t, pool, 4, 500, n, []string{"a", "b", "c"}, 500*time.Millisecond, []worker.Limit{{Kind: "lim", MaxRunning: limit}}, limit)
	var grants int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM tenure.flow_grant`).Scan(&grants))
	t.Logf("limit %d, 4 workers x 500 slots: %d jobs of 500ms in %v = %.0f jobs/s; max running: handlers %d, sampled %d (%d samples); limited claims %d, striped claims %d, permit allocations %d",
		limit, n, r.elapsed.Round(time.Millisecond), r.jobsPerSecond, r.handlerMax, r.sampledMax, r.samples, r.limitedClaims, r.stripedClaims, r.permitAllocations)
	require.LessOrEqual(t, r.handlerMax, int64(limit))
	require.LessOrEqual(t, r.sampledMax, int64(limit))
	require.Zero(t, grants, "grant rows written")
	require.Zero(t, r.stripedClaims, "a counted (striped) claim ran")
	require.Positive(t, r.permitAllocations, "no permit was allocated")
	require.Positive(t, r.limitedClaims, "the limit never bound")
}

// TestLimitOnePerKey: a limit of 1 running job per concurrency key, four workers: never two
// jobs of a key at once, while jobs of different keys run side by side.
func TestLimitOnePerKey(t *testing.T) {
	pool := pgtest.NewPool(t)
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	// The first handlers wait until two run at once (of two keys, or the limit failed).
	r := runLimitedHeld(t, pool, 4, 10, 240, keys, 5*time.Millisecond, []worker.Limit{{Kind: "lim", PerKey: true, MaxRunning: 1}}, 2)
	t.Logf("1 per key, %d keys: 240 jobs in %v = %.0f jobs/s; max per key: handlers %d, sampled %d; keys busy at once %d; limited claims %d",
		len(keys), r.elapsed.Round(time.Millisecond), r.jobsPerSecond, r.handlerKeyMax, r.sampledKeyMax, r.distinctConcurrentKeysAtOnce, r.limitedClaims)
	require.Equal(t, int64(1), r.handlerKeyMax, "two jobs of one key ran at once")
	require.LessOrEqual(t, r.sampledKeyMax, int64(1))
	require.Greater(t, r.distinctConcurrentKeysAtOnce, int64(1), "keys should run side by side")
}

// rateWindows runs 4 workers offered 6 windows' worth of jobs at once under a rate of 10
// starts per 200 ms and returns the starts per window of the database clock.
func rateWindows(t testing.TB, rate, n int, per time.Duration) (windows, counts []int64, r limRun) {
	pool := pgtest.NewPool(t)
	r = runLimited(t, pool, 4, 10, n, []string{"x"}, 0, []worker.Limit{{Kind: "lim", Rate: rate, Per: per}})
	rows, err := pool.Query(context.Background(), `
		SELECT div((extract(epoch FROM attempted_at) * 1000000)::numeric, $1::numeric)::bigint AS w, count(*)
		FROM tenure.jobs WHERE kind = 'lim' GROUP BY 1 ORDER BY 1`, per.Microseconds())
	require.NoError(t, err)
	for rows.Next() {
		var w, c int64
		require.NoError(t, rows.Scan(&w, &c))
		windows, counts = append(windows, w), append(counts, c)
	}
	require.NoError(t, rows.Err())
	return windows, counts, r
}

// TestRateLimitWindows: 4 workers offered 6 windows' worth of jobs at once under a rate of
// 10 starts per 200 ms: every window of the database clock holds at most 10 starts (the
// safety the limit promises, whatever the machine's load), and every job runs. How full the
// windows are is pace, measured by BenchmarkRateLimitWindows.
func TestRateLimitWindows(t *testing.T) {
	const rate, n = 10, 60
	per := 200 * time.Millisecond
	windows, counts, r := rateWindows(t, rate, n, per)
	t.Logf("rate %d per %v, %d jobs offered at once: %v; starts per window %v", rate, per, n, r.elapsed.Round(time.Millisecond), counts)
	var total int64
	for i, c := range counts {
		require.LessOrEqual(t, c, int64(rate), "window %d started %d jobs", windows[i], c)
		total += c
	}
	require.Equal(t, int64(n), total, "every job started once")
}

// BenchmarkRateLimitWindows reports how close to the rate the whole windows between the first
// and the last come (inner_fill: 1.0 = every window held the rate) and how many windows the
// backlog took against the n/rate it needs at best (window_overhead).
func BenchmarkRateLimitWindows(b *testing.B) {
	const rate, n = 10, 60
	per := 200 * time.Millisecond
	for range b.N {
		windows, counts, _ := rateWindows(b, rate, n, per)
		if len(counts) > 2 {
			var sum int64
			for _, c := range counts[1 : len(counts)-1] {
				sum += c
			}
			b.ReportMetric(float64(sum)/float64(len(counts)-2)/rate, "inner_fill")
		}
		b.ReportMetric(float64(windows[len(windows)-1]-windows[0]+1)/float64(n/rate), "window_overhead")
	}
}

// TestRetryAfterPausesKey: a handler's RetryAfter on a key with RetryAfterPauses holds every
// job of that key, on every worker, until the delay passed; other keys go on: every job of
// another key starts before the first of the paused key (an order, not a pace: the pause is
// long enough that a loaded machine still claims the free key's ready jobs within it).
func TestRetryAfterPausesKey(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const pause = 2 * time.Second
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4,
		Limits: []worker.Limit{{Kind: "lim", PerKey: true, MaxRunning: 10, RetryAfterPauses: true}}}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	started := map[int]time.Time{}
	var limitedOnce atomic.Bool
	var pushedAt time.Time
	worker.MustRegister(w, func(ctx context.Context, j *generics.Job[limArgs]) error {
		mu.Lock()
		if _, ok := started[j.Args.N]; !ok {
			started[j.Args.N] = time.Now()
		}
		mu.Unlock()
		if j.Args.N == 0 && limitedOnce.CompareAndSwap(false, true) {
			mu.Lock()
			pushedAt = time.Now()
			mu.Unlock()
			return worker.RetryAfter(errors.New("429 from the remote"), pause)
		}
		time.Sleep(j.Args.Sleep)
		return nil
	}, &worker.HandlerOptions{Retry: worker.FullJitter{Base: time.Millisecond, Cap: time.Millisecond}})
	c := newClient(t, pool, w)
	_, err = c.Insert(ctx, limArgs{Key: "slow", N: 0}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 5*time.Second, "the RetryAfter", func() bool { return limitedOnce.Load() && w.Stats().FlowBlocks == 1 })
	// Both keys get work now; only "slow" must wait for the pause.
	params := []jobs.InsertManyParams{}
	for i := 1; i <= 4; i++ {
		params = append(params, jobs.InsertManyParams{Args: limArgs{Key: "slow", N: i}}, jobs.InsertManyParams{Args: limArgs{Key: "fast", N: 100 + i}})
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "all jobs", func() bool { return countState(t, pool, "succeeded") == 9 })
	mu.Lock()
	defer mu.Unlock()
	var lastFree, firstPaused time.Time
	for i := 1; i <= 4; i++ {
		require.GreaterOrEqual(t, started[i].Sub(pushedAt), pause-50*time.Millisecond, "job %d of the paused key started %v after the RetryAfter", i, started[i].Sub(pushedAt))
		if firstPaused.IsZero() || started[i].Before(firstPaused) {
			firstPaused = started[i]
		}
		if started[100+i].After(lastFree) {
			lastFree = started[100+i]
		}
	}
	require.True(t, lastFree.Before(firstPaused), "the other key's jobs waited for the paused key's: last started %v after the RetryAfter, the paused key's first %v",
		lastFree.Sub(pushedAt), firstPaused.Sub(pushedAt))
}

// TestLimitConfigErrors: bad limit configurations are refused by New with typed errors.
func TestLimitConfigErrors(t *testing.T) {
	pool := pgtest.NewPool(t)
	for _, tc := range []struct {
		q    worker.QueueConfig
		want error
	}{
		{worker.QueueConfig{Limits: []worker.Limit{{Kind: "lim"}}}, worker.ErrInvalidLimit},
		{worker.QueueConfig{Limits: []worker.Limit{{Kind: "lim", MaxRunning: -1}}}, worker.ErrInvalidLimit},
		{worker.QueueConfig{Limits: []worker.Limit{{Kind: "lim", Rate: 5}}}, worker.ErrInvalidLimit},
		{worker.QueueConfig{Limits: []worker.Limit{{Kind: "lim", MaxRunning: 1, Per: time.Second}}}, worker.ErrInvalidLimit},
		{worker.QueueConfig{Limits: []worker.Limit{{Kind: "lim", MaxRunning: 1}, {Kind: "lim", Rate: 1, Per: time.Second}}}, worker.ErrDuplicateLimit},
	} {
		_, err := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": tc.q}})
		require.ErrorIs(t, err, tc.want)
		require.ErrorIs(t, err, worker.ErrInvalidConfig)
	}
	// Both bounds in one limit, per key and for the whole queue: fine.
	_, err := worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Limits: []worker.Limit{
		{Kind: "lim", PerKey: true, MaxRunning: 2, Rate: 10, Per: time.Second}, {MaxRunning: 50}}}}})
	require.NoError(t, err)
	// Limits with quotas or a deadline: fine.
	for _, f := range []worker.Fairness{{Quotas: map[int]int{3: 1, 2: 1}}, {Deadline: time.Minute}} {
		_, err = worker.New(pool, &worker.Config{Queues: map[string]worker.QueueConfig{"default": {Fairness: f, Limits: []worker.Limit{{MaxRunning: 1}}}}})
		require.NoError(t, err)
	}
	// The concurrency key is validated at insert.
	c := newClient(t, pool, nil)
	_, err = c.Insert(context.Background(), limArgs{Key: string([]byte{0xff})}, nil)
	var oe *jobs.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "ConcurrencyKey", oe.Field)
}

// TestClaimLimitedPlan: the limited claim reads candidates through jobs_ready_idx, counts
// running jobs through jobs_limited_idx, and owns the picked rows through tenure.own, whose
// UPDATE reaches them by primary key (generic and custom plans), with 100,000 finished rows
// and 2,000 running unlimited ones in the table.
func TestClaimLimitedPlan(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at)
		SELECT 'default', 'noop', '{"n":0}', 'succeeded', 1, now(), gen_random_uuid(), 1, now() FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, locked_by, locked_until)
		SELECT 'default', 'noop', '{"n":0}', 'running', 1, now(), gen_random_uuid(), 1, 'w', now() + interval '1 minute' FROM generate_series(1, 2000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, locked_by, locked_until, limited, metadata)
		SELECT 'default', 'lim', '{}', 'running', 1, now(), gen_random_uuid(), 1, 'w', now() + interval '1 minute', true,
		       jsonb_build_object('tenure.concurrency_key', 'k' || (i % 50)) FROM generate_series(1, 100) i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload) SELECT 'default', 'lim', '{}' FROM generate_series(1, 1000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tenure.jobs")
	require.NoError(t, err)

	sql, order := plantest.SQL(t, "ClaimLimited")
	args := map[string]any{
		"lim_id": []int32{0, 1}, "lim_kind": []string{"lim", ""}, "lim_per_key": []bool{true, false},
		"lim_max_running": []int32{2, 500}, "lim_rate": []int32{10, 0}, "lim_period_us": []int64{1e6, 0},
		"queue": "default", "seg_priority": []int16{9, 8, 7, 6, 5, 4, 3, 2, 1}, "seg_after_us": make([]int64, 9),
		"seg_min_age_us": make([]int64, 9), "seg_max_age_us": []int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15},
		"kind_versions": []int32{1, 1}, "kinds": []string{"lim", "noop"}, "scan": 20, "batch": 10,
		"reserve": 300, "group_cap": 100,
		"worker_id": "explain-worker", "kind_lease_ms": []int32{0, 0},
		// ordered (strict): every limit and quota the scan, ranks in serving order
		"seg_limit": []int32{20, 20, 20, 20, 20, 20, 20, 20, 20}, "seg_rank": []int32{1, 2, 3, 4, 5, 6, 7, 8, 9},
		"seg_quota": []int32{20, 20, 20, 20, 20, 20, 20, 20, 20},
	}
	vals := func() []any {
		var vals []any
		for _, name := range order {
			v, ok := args[name]
			require.True(t, ok, "no value for %s", name)
			vals = append(vals, v)
		}
		return vals
	}
	plan := plantest.Explain(t, pool, true, sql, vals()...)
	idx := plantest.Indexes(plan)
	for _, want := range []string{"jobs_ready_idx", "jobs_limited_idx"} {
		require.True(t, idx[want], "ClaimLimited does not use %s (uses %v)", want, idx)
	}
	plantest.OwnPlans(t, pool, sql, vals()...)
	plantest.Walk(plan, func(n plantest.Node) {
		require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "ClaimLimited scans the jobs table")
	})
	t.Logf("ClaimLimited (EXPLAIN ANALYZE, rolled back): %d buffers; indexes %v", plan.Buffers(), idx)

	// Exclusive: the same statement without the reserve and the cap.
	args["reserve"], args["group_cap"] = 0, 1<<30
	plan = plantest.ExplainEngine(t, pool, true, sql, vals()...)
	plantest.Walk(plan, func(n plantest.Node) {
		require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "exclusive ClaimLimited scans the jobs table")
	})

	// Ranked (quotas, deadline): each segment reads its own LIMIT through jobs_ready_idx.
	args["scan"] = 90
	args["seg_limit"], args["seg_rank"], args["seg_quota"] = []int32{10, 10, 10, 10, 10, 10, 10, 10, 10}, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, []int32{5, 1, 1, 1, 1, 1, 1, 1, 1}
	plan = plantest.ExplainEngine(t, pool, true, sql, vals()...)
	idx = plantest.Indexes(plan)
	for _, want := range []string{"jobs_ready_idx", "jobs_limited_idx"} {
		require.True(t, idx[want], "ranked ClaimLimited does not use %s (uses %v)", want, idx)
	}
	plantest.OwnPlans(t, pool, sql, vals()...)
	plantest.Walk(plan, func(n plantest.Node) {
		require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "ranked ClaimLimited scans the jobs table")
	})
	t.Logf("ClaimLimited ranked (EXPLAIN ANALYZE, rolled back): %d buffers; indexes %v", plan.Buffers(), idx)
}

// TestLimitFreedBySIGKILL: a worker process holding the 2 jobs a limit of 2 allows is
// SIGKILLed. Until their leases expire on the database clock nobody else starts a job of the
// kind (the dead worker's jobs still count); once they expire the limit frees without any
// sweep, and every job completes. The table never shows more than 2 running leased jobs.
func TestLimitFreedBySIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("child process and a lease expiry (~3 s)")
	}
	ctx := context.Background()
	pool, url := chaosPool(t)
	c := newClient(t, pool, nil)
	var ids []int64
	for i := range 4 {
		row, err := c.Insert(ctx, chaosArgs{Tag: fmt.Sprint("limited-", i)}, &jobs.InsertOpts{Lease: 2 * time.Second, MaxAttempts: 5})
		require.NoError(t, err)
		ids = append(ids, row.Job.ID)
	}
	stop := make(chan struct{})
	sTotal, _, samples, sDone := sampleKind(pool, "chaos", stop)

	child := startChild(t, childOpts{DB: url, Handler: "block", ID: "doomed-limited", Concurrency: 4, Flags: "limit2"})
	claimedN := func() int {
		n := 0
		child.find("claimed", func([]string) bool { n++; return false })
		return n
	}
	waitFor(t, 20*time.Second, "the child to claim 2 jobs", func() bool { return claimedN() >= 2 })
	// The worker has 4 slots and 4 jobs, but the limit lets it run 2.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 2, claimedN(), "the child ran more jobs than the limit")

	// A second worker with the same limit starts nothing while the child holds both.
	var mu sync.Mutex
	var firstStart time.Time
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4, Limits: []worker.Limit{{Kind: "chaos", MaxRunning: 2}}}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[chaosArgs]) error {
		mu.Lock()
		if firstStart.IsZero() {
			firstStart = time.Now()
		}
		mu.Unlock()
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	// Its claims run and the limit holds them back (observed, not assumed after a pause).
	waitFor(t, 30*time.Second, "limited claims of the second worker", func() bool { return w.Stats().LimitedClaims >= 2 })
	mu.Lock()
	require.True(t, firstStart.IsZero(), "a job started while the limit was full")
	mu.Unlock()

	child.killAndWait(t)
	killed := time.Now()
	// The limit frees a slot when the first of the dead worker's two leases ends: its jobs
	// were claimed and heartbeated apart, so their leases may end apart too (the later one
	// ended ~0.5 s after a first start under -race on a loaded machine).
	var leaseEnd, lastLeaseEnd time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(locked_until), max(locked_until) FROM tenure.jobs WHERE locked_by = 'doomed-limited'`).Scan(&leaseEnd, &lastLeaseEnd))
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	waitFor(t, 20*time.Second, "every job to complete", func() bool { return countState(t, pool, "succeeded") == len(ids) })
	close(stop)
	<-sDone
	mu.Lock()
	defer mu.Unlock()
	// The dead worker's first lease ended leaseEnd on the database clock (dbNow was read right
	// after the kill); the first job started after that, give or take the clocks' 50 ms.
	untilExpiry := leaseEnd.Sub(dbNow)
	t.Logf("killed at %v; first lease ended %v later, last %v; first start after the kill %v later; max running sampled %d (%d samples)",
		killed.Format("15:04:05.000"), untilExpiry.Round(time.Millisecond), lastLeaseEnd.Sub(dbNow).Round(time.Millisecond),
		firstStart.Sub(killed).Round(time.Millisecond), sTotal.v.Load(), samples.Load())
	require.GreaterOrEqual(t, firstStart.Sub(killed), untilExpiry-50*time.Millisecond, "a job started before either of the dead worker's leases expired")
	require.LessOrEqual(t, sTotal.v.Load(), int64(2))
	require.Positive(t, samples.Load())
}

// limitedOrdered are the ClaimOrdered parameters of a claim of batch lim jobs of queue
// "default", every band from its start, in strict priority order reading up to 2·batch
// candidates, as the tests drive the limited claim statements.
func limitedOrdered(batch int32) gen.ClaimOrderedParams {
	scan := 2 * batch
	o := gen.ClaimOrderedParams{WorkerID: "limit-test", Queue: "default", Batch: batch, Scan: scan,
		SegPriority: []int16{9, 8, 7, 6, 5, 4, 3, 2, 1}, SegAfterUs: make([]int64, 9), SegMinAgeUs: make([]int64, 9),
		SegMaxAgeUs: []int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15},
		Kinds:       []string{"lim"}, KindVersions: []int32{1}, KindLeaseMs: []int32{0}}
	for i := range o.SegPriority {
		o.SegLimit, o.SegRank, o.SegQuota = append(o.SegLimit, scan), append(o.SegRank, int32(i+1)), append(o.SegQuota, scan)
	}
	return o
}

// rateClaim runs an exclusive limited claim of batch jobs of kind lim under one limit, 10 starts
// per hour per concurrency key, in its own transaction, and returns how many it claimed.
func rateClaim(ctx context.Context, pool *pgxpool.Pool, batch int32) (int, error) {
	o := limitedOrdered(batch)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	q := gen.New(tx)
	if err := q.ClaimLimitsLock(ctx, gen.ClaimLimitsLockParams{Queue: "default", FirstClass: locks.LimitsClass, LastClass: locks.LimitsClass + 3}); err != nil {
		return 0, err
	}
	rows, err := q.ClaimLimited(ctx, gen.ClaimLimitedParams{Reserve: 0, GroupCap: 1 << 30, WorkerID: o.WorkerID, Queue: o.Queue,
		Batch: batch, Scan: o.Scan, SegPriority: o.SegPriority, SegAfterUs: o.SegAfterUs, SegMinAgeUs: o.SegMinAgeUs, SegMaxAgeUs: o.SegMaxAgeUs,
		SegLimit: o.SegLimit, SegRank: o.SegRank, SegQuota: o.SegQuota, Kinds: o.Kinds, KindVersions: o.KindVersions, KindLeaseMs: o.KindLeaseMs,
		LimID: []int32{0}, LimKind: []string{"lim"}, LimPerKey: []bool{true}, LimMaxRunning: []int32{0}, LimRate: []int32{10}, LimPeriodUs: []int64{3600e6}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rows {
		if r.ID != nil {
			n++
		}
	}
	return n, tx.Commit(ctx)
}

// TestFlowPrune: the worker's flow prune deletes the tenure.flow rows that carry nothing (window
// over, no pause in force) and keeps the others, in bounded passes; a limited claim racing it
// (either order) keeps its count.
func TestFlowPrune(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2, Limits: []worker.Limit{
		{Kind: "lim", PerKey: true, Rate: 10, Per: time.Hour},
		{Kind: "other", MaxRunning: 2, RetryAfterPauses: true},
	}}})
	cfg.ReclaimEvery, cfg.PruneEvery = time.Hour, time.Hour // the test drives the prune
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error { return nil }, nil)
	startWorker(t, w)

	_, err = pool.Exec(ctx, `INSERT INTO tenure.flow (queue, kind, key, window_start, started, blocked_until) VALUES
		('default', 'lim', 'old', now() - interval '2 hours', 3, NULL),             -- window over: goes
		('default', 'lim', 'current', now() - interval '1 minute', 3, NULL),         -- current window: stays
		('default', 'lim', 'paused', now() - interval '2 hours', 0, now() + interval '1 hour'), -- pause in force: stays
		('default', 'lim', 'unpaused', 'epoch', 0, now() - interval '1 second'),     -- pause over: goes
		('default', 'other', '', 'epoch', 0, now() + interval '1 hour'),             -- pause in force: stays
		('default', '', '', 'epoch', 0, now() - interval '1 minute'),                -- pause over: goes
		('default', 'unknown', 'x', now() - interval '2 hours', 1, NULL),            -- no limit: within 24 h, stays
		('default', 'unknown', 'y', now() - interval '25 hours', 1, NULL),           -- no limit: past 24 h, goes
		('elsewhere', 'lim', 'old', now() - interval '2 hours', 3, NULL)             -- a queue the worker does not serve: stays`)
	require.NoError(t, err)
	// 25,000 stale per-key rows: more than one pass (20 steps of 1,000) removes.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.flow (queue, kind, key, window_start, started)
		SELECT 'default', 'lim', 'bulk-' || lpad(i::text, 6, '0'), now() - interval '3 hours', 1 FROM generate_series(1, 25000) i`)
	require.NoError(t, err)

	keys := func() []string {
		var ks []string
		rows, err := pool.Query(ctx, `SELECT queue || '/' || kind || '/' || key FROM tenure.flow ORDER BY 1`)
		require.NoError(t, err)
		for rows.Next() {
			var k string
			require.NoError(t, rows.Scan(&k))
			ks = append(ks, k)
		}
		require.NoError(t, rows.Err())
		return ks
	}
	n1, err := w.PruneFlow(ctx)
	require.NoError(t, err)
	require.Positive(t, n1)
	require.LessOrEqual(t, n1, 20000, "a pass deleted more than it may read")
	n2, err := w.PruneFlow(ctx)
	require.NoError(t, err)
	require.Equal(t, 25000+4, n1+n2, "left: %v", keys())
	require.Equal(t, []string{"default/lim/current", "default/lim/paused", "default/other/", "default/unknown/x", "elsewhere/lim/old"}, keys())

	// Race 1: a claim has counted into a stale row and not committed: the prune skips the row;
	// once committed the row holds the current window and stays.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, metadata)
		SELECT 'default', 'lim', '{}', jsonb_build_object('tenure.concurrency_key', k)
		FROM unnest(ARRAY['race1', 'race1', 'race2', 'race2', 'race2']) k`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.flow (queue, kind, key, window_start, started) VALUES
		('default', 'lim', 'race1', now() - interval '2 hours', 10)`)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `UPDATE tenure.flow SET started = 2,
		window_start = 'epoch'::timestamptz + floor(extract(epoch FROM now()) / 3600) * interval '1 hour' -- the current window
		WHERE queue = 'default' AND key = 'race1'`)
	require.NoError(t, err)
	_, err = w.PruneFlow(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = w.PruneFlow(ctx)
	require.NoError(t, err)
	var started int
	require.NoError(t, pool.QueryRow(ctx, `SELECT started FROM tenure.flow WHERE queue = 'default' AND key = 'race1'`).Scan(&started))
	require.Equal(t, 2, started)

	// Race 2: the prune has deleted a stale row and not committed when a claim counts into it:
	// the claim waits, then inserts the row afresh with its starts.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.flow (queue, kind, key, window_start, started) VALUES
		('default', 'lim', 'race2', now() - interval '2 hours', 10)`)
	require.NoError(t, err)
	ptx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = ptx.Rollback(ctx) }()
	r, err := gen.New(ptx).FlowPrune(ctx, gen.FlowPruneParams{LockKey: int64(locks.FlowPrune), Queue: "default", Batch: 1000, FromStart: true,
		LimKind: []string{"lim"}, LimPerKey: []bool{true}, LimPeriodUs: []int64{3600e6}})
	require.NoError(t, err)
	require.True(t, r.Locked)
	require.Equal(t, int32(1), r.Deleted) // race2
	done := make(chan error, 1)
	claimedN := make(chan int, 1)
	go func() {
		n, err := rateClaim(ctx, pool, 10)
		claimedN <- n
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the claim did not wait for the prune's delete: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, ptx.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, 5, <-claimedN) // race1: 2 more (room 10-2), race2: 3 (its old window is over)
	rows, err := pool.Query(ctx, `SELECT key, started, window_start > now() - interval '1 hour' FROM tenure.flow
		WHERE queue = 'default' AND key IN ('race1', 'race2') ORDER BY key`)
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		var current bool
		require.NoError(t, rows.Scan(&k, &n, &current))
		require.True(t, current, k)
		got[k] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"race1": 4, "race2": 3}, got)
}

// TestLimitWithQuotas: limits on a queue with quotas (ranked claims). While no limit binds, a
// batch honours the quota shares exactly as without limits (12/6/2 of 20, and a band's unused
// share flows to the others); when the limit binds, two workers of 20 slots each start 7 jobs
// in all, never more, and the rest once room returns.
func TestLimitWithQuotas(t *testing.T) {
	quotas := worker.Fairness{Quotas: map[int]int{jobs.PriorityHigh: 12, jobs.PriorityNormal: 6, jobs.PriorityLow: 2}}
	far := []worker.Limit{{Kind: "noop", MaxRunning: 1000}}
	t.Run("shares", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		c := newClient(t, pool, nil)
		past := time.Now().Add(-time.Second)
		insertAt(t, c, 30, jobs.PriorityHigh, past)
		insertAt(t, c, 30, jobs.PriorityNormal, past)
		insertAt(t, c, 30, jobs.PriorityLow, past)
		started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 20, Fairness: quotas, Limits: far})
		require.Equal(t, map[int]int{3: 12, 2: 6, 1: 2}, collect(t, started, 20))
	})
	t.Run("unused share flows", func(t *testing.T) {
		pool := pgtest.NewPool(t)
		c := newClient(t, pool, nil)
		past := time.Now().Add(-time.Second)
		insertAt(t, c, 30, jobs.PriorityHigh, past)
		insertAt(t, c, 2, jobs.PriorityNormal, past)
		started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 20, Fairness: quotas, Limits: far})
		require.Equal(t, map[int]int{3: 18, 2: 2}, collect(t, started, 20))
	})
	for _, f := range []struct {
		name string
		f    worker.Fairness
	}{{"quotas bound", quotas}, {"deadline bound", worker.Fairness{Deadline: time.Millisecond}}} {
		t.Run(f.name, func(t *testing.T) {
			pool := pgtest.NewPool(t)
			c := newClient(t, pool, nil)
			past := time.Now().Add(-time.Second)
			insertAt(t, c, 30, jobs.PriorityHigh, past)
			insertAt(t, c, 30, jobs.PriorityNormal, past)
			insertAt(t, c, 30, jobs.PriorityLow, past)
			stop := make(chan struct{})
			sTotal, _, samples, sDone := sampleKind(pool, "noop", stop)
			qc := worker.QueueConfig{Concurrency: 20, Fairness: f.f, Limits: []worker.Limit{{Kind: "noop", MaxRunning: 7}}}
			s1, r1 := blockingWorker(t, pool, qc)
			s2, r2 := blockingWorker(t, extraPool(t, pool, 10), qc)
			n := 0
			deadline := time.After(10 * time.Second)
			for n < 7 {
				select {
				case <-s1:
				case <-s2:
				case <-deadline:
					t.Fatalf("only %d of 7 jobs started", n)
				}
				n++
			}
			select {
			case <-s1:
				t.Fatal("an 8th job started on worker 1")
			case <-s2:
				t.Fatal("an 8th job started on worker 2")
			case <-time.After(500 * time.Millisecond):
			}
			close(r1)
			close(r2)
			for n < 90 {
				select {
				case <-s1:
				case <-s2:
				case <-time.After(10 * time.Second):
					t.Fatalf("only %d of 90 jobs started", n)
				}
				n++
			}
			close(stop)
			<-sDone
			require.Positive(t, samples.Load())
			require.LessOrEqual(t, sTotal.v.Load(), int64(7), "the table showed more running leased jobs than the limit")
		})
	}
}

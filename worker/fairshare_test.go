package worker_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/gen"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// insertTenant inserts n jobs of tenant key ("" = no key) due at runAt, in priority prio.
func insertTenant(t testing.TB, c *jobs.Client, key string, n, prio int, runAt time.Time) {
	t.Helper()
	var ps []jobs.InsertManyParams
	for i := range n {
		ps = append(ps, jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{FairKey: key, Priority: prio, RunAt: runAt}})
	}
	for len(ps) > 0 {
		k := min(len(ps), 1000)
		_, err := c.InsertMany(context.Background(), ps[:k])
		require.NoError(t, err)
		ps = ps[k:]
	}
}

// startOrder runs a worker over the queue until want jobs started and returns the fair key
// ("" = none) and priority of each, in start order. Handlers take 2 ms.
func startOrder(t *testing.T, pool *pgxpool.Pool, qc worker.QueueConfig, want int) (keys []string, prios []int) {
	t.Helper()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": qc}))
	require.NoError(t, err)
	var mu sync.Mutex
	done := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		if len(keys) < want {
			keys = append(keys, job.Metadata[jobs.FairKeyMetadata])
			prios = append(prios, job.Priority)
			if len(keys) == want {
				close(done)
			}
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		return nil
	}, nil)
	startWorker(t, w)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("only %d of %d jobs started", len(keys), want)
	}
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	return append([]string(nil), keys...), append([]int(nil), prios...)
}

func countKeys(keys []string, pred func(string) bool) int {
	n := 0
	for _, k := range keys {
		if pred(k) {
			n++
		}
	}
	return n
}

// TestFairShareServesEveryTenantEachRound: tenant "heavy" has 400 jobs due 10 s ago, eight
// light tenants 3 jobs each due 1 s ago. With fair share every light job starts within the
// first rounds (one job per tenant per round: 9 tenants, 3 rounds = 27 starts, plus the
// claims in flight); without it (the control) the heavy tenant's older backlog goes first and
// no light job starts among the first 60.
func TestFairShareServesEveryTenantEachRound(t *testing.T) {
	t.Parallel()
	light := func(k string) bool { return k != "heavy" }
	for _, tc := range []struct {
		name string
		fair bool
	}{{"fair-share", true}, {"control-strict", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			c := newClient(t, pool, nil)
			now := time.Now()
			insertTenant(t, c, "heavy", 400, jobs.PriorityNormal, now.Add(-10*time.Second))
			for i := range 8 {
				insertTenant(t, c, fmt.Sprintf("light-%d", i), 3, jobs.PriorityNormal, now.Add(-time.Second))
			}
			keys, _ := startOrder(t, pool, worker.QueueConfig{Concurrency: 4, Fairness: worker.Fairness{FairShare: tc.fair}}, 60)
			if !tc.fair {
				require.Zero(t, countKeys(keys, light), "control: the heavy tenant's older backlog goes first: %v", keys)
				return
			}
			require.Equal(t, 24, countKeys(keys[:45], light), "every light job within the first 45 starts: %v", keys)
			require.GreaterOrEqual(t, countKeys(keys[:27], light), 16, "light tenants interleave from the first round: %v", keys)
		})
	}
}

// TestFairShareRotatesPastTheBatch: 60 tenants with ready jobs and claims of at most 5: the
// band's cursor carries each claim on from the tenant the previous one served last, wrapping
// around, so the first 60 starts reach (almost) every tenant once, the heavy one (sorting
// last) included, and the heavy tenant gets about one start per round, not the whole queue.
func TestFairShareRotatesPastTheBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	now := time.Now()
	insertTenant(t, c, "zz-heavy", 500, jobs.PriorityNormal, now.Add(-10*time.Second))
	for i := range 59 {
		insertTenant(t, c, fmt.Sprintf("t-%02d", i), 2, jobs.PriorityNormal, now.Add(-time.Second))
	}
	keys, _ := startOrder(t, pool, worker.QueueConfig{Concurrency: 5, Claimers: 1, Fairness: worker.Fairness{FairShare: true}}, 120)
	seen := map[string]bool{}
	for _, k := range keys[:60] {
		seen[k] = true
	}
	// One round is 60 starts, one per tenant; claims in flight blur its edges a little.
	// Without the cursor every claim would start again from the first tenants: 30 distinct
	// tenants, twice each, and the heavy one only after all 118 light jobs.
	require.GreaterOrEqual(t, len(seen), 54, "the first 60 starts reach (almost) every tenant once: %v", keys)
	require.Less(t, slices.Index(keys, "zz-heavy"), 70, "the heavy tenant (sorting last) is reached in the first round: %v", keys)
	heavy := countKeys(keys, func(k string) bool { return k == "zz-heavy" })
	require.LessOrEqual(t, heavy, 6, "the heavy tenant gets about one start per round: %v", keys)
}

// TestFairShareKeylessAndKeyedAllRun: keyless jobs in a fair-share queue are one more
// participant; every job, keyed or not, runs exactly once with several workers claiming.
func TestFairShareKeylessAndKeyedAllRun(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	now := time.Now()
	insertTenant(t, c, "", 150, jobs.PriorityNormal, now.Add(-5*time.Second))
	for i := range 10 {
		insertTenant(t, c, fmt.Sprintf("k%d", i), 60, jobs.PriorityNormal, now.Add(-time.Duration(i)*time.Second))
	}
	insertTenant(t, c, "k-high", 50, jobs.PriorityHigh, now)
	const total = 150 + 600 + 50
	var mu sync.Mutex
	runs := map[int64]int{}
	for range 3 {
		w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 8,
			Fairness: worker.Fairness{FairShare: true}}}))
		require.NoError(t, err)
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			return nil
		}, nil)
		startWorker(t, w)
	}
	waitFor(t, 30*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, total)
	for id, n := range runs {
		if n != 1 {
			var att, gen int64
			var errs string
			_ = pool.QueryRow(context.Background(), "select attempts, generation, errors::text from tenure.jobs where id=$1", id).Scan(&att, &gen, &errs)
			t.Logf("DEBUG job %d ran %d: attempts=%d generation=%d errors=%s", id, n, att, gen, errs)
		}
		require.Equal(t, 1, n, "job %d ran %d times", id, n)
	}
}

// TestFairShareWithQuotas: quotas still decide the bands' shares (1:1 between high and
// normal), and fair share the order within each band: of the first 40 starts about half are
// high, and within high the light tenant is not starved by the heavy one.
func TestFairShareWithQuotas(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	now := time.Now()
	insertTenant(t, c, "h-heavy", 200, jobs.PriorityHigh, now.Add(-10*time.Second))
	insertTenant(t, c, "h-light", 5, jobs.PriorityHigh, now.Add(-time.Second))
	insertTenant(t, c, "n-heavy", 200, jobs.PriorityNormal, now.Add(-10*time.Second))
	insertTenant(t, c, "n-light", 5, jobs.PriorityNormal, now.Add(-time.Second))
	keys, prios := startOrder(t, pool, worker.QueueConfig{Concurrency: 4, Claimers: 1, Fairness: worker.Fairness{
		FairShare: true, Quotas: map[int]int{jobs.PriorityHigh: 1, jobs.PriorityNormal: 1}}}, 40)
	high := 0
	for _, p := range prios {
		if p == jobs.PriorityHigh {
			high++
		}
	}
	require.InDelta(t, 20, high, 6, "quota 1:1: %v", prios)
	require.Equal(t, 5, countKeys(keys, func(k string) bool { return k == "h-light" }), "%v", keys)
	require.Equal(t, 5, countKeys(keys, func(k string) bool { return k == "n-light" }), "%v", keys)
}

func TestFairShareRefusesLimits(t *testing.T) {
	pool := pgtest.NewPool(t)
	_, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2,
		Fairness: worker.Fairness{FairShare: true}, Limits: []worker.Limit{{MaxRunning: 3}}}}))
	require.ErrorIs(t, err, worker.ErrFairShareWithLimits)
	require.ErrorIs(t, err, worker.ErrInvalidConfig)
}

// TestClaimFairPlan: the fair claim reads tenants and their jobs through jobs_fair_idx, keyless
// jobs through jobs_ready_idx, locks through the primary key, and never scans the table, on a
// table with finished rows, a heavy tenant and many light ones.
func TestClaimFairPlan(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at)
		SELECT 'default', 'noop', '{"n":0}', 'succeeded', 1, now(), gen_random_uuid(), 1, now() FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, metadata, run_at)
		SELECT 'default', 'noop', '{"n":0}', jsonb_build_object('tenure.fair_key', 'heavy'), now() - interval '1 hour' FROM generate_series(1, 50000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, metadata)
		SELECT 'default', 'noop', '{"n":0}', jsonb_build_object('tenure.fair_key', 't' || (i % 200)) FROM generate_series(1, 2000) i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tenure.jobs")
	require.NoError(t, err)

	sql, order := plantest.SQL(t, "ClaimFair")
	args := map[string]any{
		"queue": "default", "seg_priority": []int16{9, 8, 7, 6, 5, 4, 3, 2, 1},
		"seg_min_age_us": make([]int64, 9), "seg_max_age_us": []int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15},
		"seg_rank": []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, "seg_quota": []int32{30, 30, 30, 30, 30, 30, 30, 30, 30},
		"cursor_priority": []int16{2}, "cursor_key": []string{"t150"}, "seg_after_us": make([]int64, 9),
		"known_priority": []int16{2}, "known_key": []string{"heavy"}, "known_after_us": []int64{0},
		"kind_versions": []int32{1}, "kinds": []string{"noop"}, "batch": 30,
		"worker_id": "explain-worker", "kind_lease_ms": []int32{0},
	}
	var vals []any
	for _, name := range order {
		v, ok := args[name]
		require.True(t, ok, "no value for %s", name)
		vals = append(vals, v)
	}
	for _, generic := range []bool{true, false} {
		plan := plantest.ExplainEngine(t, pool, generic, sql, vals...)
		idx := plantest.Indexes(plan)
		for _, want := range []string{"jobs_ready_idx", "jobs_fair_idx", "jobs_pkey"} {
			require.True(t, idx[want], "ClaimFair does not use %s (uses %v)", want, idx)
		}
		plantest.Walk(plan, func(n plantest.Node) {
			require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "ClaimFair scans the jobs table")
		})
		t.Logf("ClaimFair generic=%v (EXPLAIN ANALYZE, rolled back): %d buffers; indexes %v", generic, plan.Buffers(), idx)
	}
	plantest.OwnPlans(t, pool, sql, vals...) // tenure.own reaches the picked rows by primary key
	// The tenants themselves: one descent per tenant, not a walk of the heavy backlog.
	var buffers int
	rows, err := pool.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) SELECT * FROM tenure.fair_keys('default', 2::smallint, '', 1000, '{}', '{}')`)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		var hit, read int
		if n, _ := fmt.Sscanf(trimToBuffers(line), "Buffers: shared hit=%d read=%d", &hit, &read); n >= 1 && buffers == 0 {
			buffers = hit + read
		}
	}
	require.NoError(t, rows.Err())
	require.Positive(t, buffers)
	require.Less(t, buffers, 201*6, "fair_keys reads a few buffers per tenant (201 tenants), not the heavy tenant's 50,000 entries")
	t.Logf("fair_keys over 201 tenants: %d buffers", buffers)
}

func trimToBuffers(line string) string {
	for i := range line {
		if len(line[i:]) >= 8 && line[i:i+8] == "Buffers:" {
			return line[i:]
		}
	}
	return ""
}

// TestClaimFairReadsFromWatermarks: while a REPEATABLE READ snapshot holds the horizon, the
// index entries of 10,000 claimed jobs of one tenant stay at the front of its range. Given the
// tenant's watermark (and the keyless one), the fair claim descends past them; without, it
// walks them (the engine keeps the watermarks: TestFairWatermarks).
func TestClaimFairReadsFromWatermarks(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, metadata, run_at)
		SELECT 'default', 'noop', '{"n":0}', jsonb_build_object('tenure.fair_key', 't0'),
		       '2026-01-01'::timestamptz + i * interval '1 ms' FROM generate_series(1, 20000) i`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM ANALYZE tenure.jobs")
	require.NoError(t, err)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
	require.NoError(t, err)
	var n int
	require.NoError(t, holder.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'running', locked_by = 'w', locked_until = now() + interval '1 hour',
		claim_token = gen_random_uuid(), generation = 1, attempts = 1, attempted_at = now()
		WHERE run_at <= '2026-01-01'::timestamptz + 10000 * interval '1 ms'`)
	require.NoError(t, err)
	wm := time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC).UnixMicro()

	sql, order := plantest.SQL(t, "ClaimFair")
	buffers := func(after int64) int64 {
		segAfter := make([]int64, 9)
		segAfter[7] = after
		args := map[string]any{
			"queue": "default", "seg_priority": []int16{9, 8, 7, 6, 5, 4, 3, 2, 1}, "seg_after_us": segAfter,
			"seg_min_age_us": make([]int64, 9), "seg_max_age_us": []int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15},
			"seg_rank": []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, "seg_quota": []int32{30, 30, 30, 30, 30, 30, 30, 30, 30},
			"cursor_priority": []int16{}, "cursor_key": []string{},
			"known_priority": []int16{}, "known_key": []string{}, "known_after_us": []int64{},
			"kind_versions": []int32{1}, "kinds": []string{"noop"}, "batch": 30,
			"worker_id": "explain-worker", "kind_lease_ms": []int32{0},
		}
		if after > 0 {
			args["known_priority"], args["known_key"], args["known_after_us"] = []int16{2}, []string{"t0"}, []int64{after}
		}
		var vals []any
		for _, name := range order {
			vals = append(vals, args[name])
		}
		// The reads: everything but the UPDATE of the claimed rows (the same in both), which
		// tenure.own runs (its buffers are its Function Scan's).
		plan := plantest.ExplainEngine(t, pool, true, sql, vals...)
		read := plan.Buffers()
		plantest.Walk(plan, func(n plantest.Node) {
			if n.NodeType == "ModifyTable" || (n.NodeType == "Function Scan" && n.Function == "own") {
				read -= n.Buffers()
			}
		})
		return read
	}
	from, past := buffers(0), buffers(wm)
	t.Logf("a claim of 30 behind 10,000 claimed entries reads %d buffers from the start, %d from the watermarks", from, past)
	require.Less(t, past, int64(300))
	require.Greater(t, from, 3*past)
}

// TestClaimFairNeverReturnsAJobTwice runs the fair claim statement from eight connections at
// once, small batches over few tenants, so that each claim locks rows it does not claim (the
// shares' rounding) and releases them while the others run. Every claimed job must come back
// once, from one claim: a job returned twice is started twice. (ClaimFair's "more" step used to
// re-read a tenant's range with OFFSET share: when a row another claim held while "cand" read
// was released before "more" read it, the offset shifted back over rows "cand" had already
// taken, and those were returned a second time. This test failed 1 run in 8 then;
// TestFairShareKeylessAndKeyedAllRun saw a job run twice about once in 25 runs.)
func TestClaimFairNeverReturnsAJobTwice(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) {
		c.MaxConns = 10
		maps.Copy(c.ConnConfig.RuntimeParams, engineconf.Settings) // as the engine's pool (jit off)
	})
	c := newClient(t, pool, nil)
	now := time.Now()
	const tenants, per, keyless = 8, 150, 100
	for i := range tenants {
		insertTenant(t, c, fmt.Sprintf("t%d", i), per, jobs.PriorityNormal, now.Add(-time.Duration(i)*time.Millisecond))
	}
	insertTenant(t, c, "", keyless, jobs.PriorityNormal, now)
	const total = tenants*per + keyless

	q := gen.New(pool)
	var mu sync.Mutex
	seen := map[int64]int{}
	var dupInClaim []int64
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				arg := gen.ClaimFairParams{WorkerID: fmt.Sprintf("w%d", g), Queue: "default", Batch: int32(2 + (g+i)%6),
					Kinds: []string{"noop"}, KindVersions: []int32{1}, KindLeaseMs: []int32{0},
					SegPriority: []int16{int16(jobs.PriorityNormal)}, SegAfterUs: []int64{0}, SegMinAgeUs: []int64{0},
					SegMaxAgeUs: []int64{(100 * 365 * 24 * time.Hour).Microseconds()}, SegRank: []int32{0}, SegQuota: []int32{0}}
				rows, err := q.ClaimFair(ctx, arg)
				if !assert.NoError(t, err) {
					return
				}
				mine := map[int64]bool{}
				n := 0
				mu.Lock()
				for _, r := range rows {
					if r.ID == nil {
						continue
					}
					n++
					if mine[*r.ID] {
						dupInClaim = append(dupInClaim, *r.ID)
					}
					mine[*r.ID] = true
					seen[*r.ID]++
				}
				mu.Unlock()
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, dupInClaim, "jobs returned twice by one claim")
	for id, n := range seen {
		require.Equal(t, 1, n, "job %d claimed %d times", id, n)
	}
	require.Len(t, seen, total)
}

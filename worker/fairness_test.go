package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// blockingWorker starts a worker whose noop handler records the claimed jobs' priorities and
// blocks until release is closed.
func blockingWorker(t *testing.T, pool *pgxpool.Pool, qc worker.QueueConfig) (started chan *generics.Job[noopArgs], release chan struct{}) {
	t.Helper()
	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": qc}))
	require.NoError(t, err)
	started = make(chan *generics.Job[noopArgs], 1000)
	release = make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		started <- job
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, nil)
	startWorker(t, w)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return started, release
}

func insertAt(t *testing.T, c *jobs.Client, n, priority int, runAt time.Time) {
	t.Helper()
	var ps []jobs.InsertManyParams
	for i := range n {
		ps = append(ps, jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Priority: priority, RunAt: runAt}})
	}
	_, err := c.InsertMany(context.Background(), ps)
	require.NoError(t, err)
}

func collect(t *testing.T, ch chan *generics.Job[noopArgs], n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		select {
		case j := <-ch:
			got[j.Priority]++
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d jobs started", len(got), n)
		}
	}
	return got
}

func TestQuotaSharesHonouredWithinOneBatch(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	past := time.Now().Add(-time.Second)
	insertAt(t, c, 30, jobs.PriorityHigh, past)
	insertAt(t, c, 30, jobs.PriorityNormal, past)
	insertAt(t, c, 30, jobs.PriorityLow, past)
	// 20 slots: the first claim is one batch of 20.
	started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 20,
		Fairness: worker.Fairness{Quotas: map[int]int{jobs.PriorityHigh: 12, jobs.PriorityNormal: 6, jobs.PriorityLow: 2}}})
	got := collect(t, started, 20)
	require.Equal(t, map[int]int{3: 12, 2: 6, 1: 2}, got)
}

func TestQuotaUnusedShareFlowsToOtherBands(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	past := time.Now().Add(-time.Second)
	insertAt(t, c, 30, jobs.PriorityHigh, past)
	insertAt(t, c, 2, jobs.PriorityNormal, past) // normal's share is 6, it has 2
	// no low jobs at all: its 2 flow too
	started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 20,
		Fairness: worker.Fairness{Quotas: map[int]int{jobs.PriorityHigh: 12, jobs.PriorityNormal: 6, jobs.PriorityLow: 2}}})
	got := collect(t, started, 20)
	require.Equal(t, map[int]int{3: 18, 2: 2}, got, "the batch is full: quotas never leave a slot idle while work exists")
}

func TestAgedLowJobGoesBeforeFreshHigh(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		lowAge   time.Duration
		wantPrio int
	}{
		{"past the threshold", 11 * time.Minute, jobs.PriorityLow},
		{"not yet", 4 * time.Minute, jobs.PriorityHigh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			c := newClient(t, pool, nil)
			insertAt(t, c, 1, jobs.PriorityLow, time.Now().Add(-tc.lowAge))
			insertAt(t, c, 5, jobs.PriorityHigh, time.Now().Add(-time.Second))
			// Step 5m, ceiling high (3): a low job reaches the ceiling after 10 minutes.
			started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 1,
				Fairness: worker.Fairness{Aging: &worker.Aging{Step: 5 * time.Minute, Ceiling: jobs.PriorityHigh}}})
			got := collect(t, started, 1)
			require.Equal(t, map[int]int{tc.wantPrio: 1}, got)
		})
	}
}

func TestDeadlinePromotionTakesOldestFirst(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, nil)
	insertAt(t, c, 1, jobs.PriorityLow, time.Now().Add(-2*time.Minute))
	insertAt(t, c, 5, jobs.PriorityCritical, time.Now().Add(-time.Second))
	started, _ := blockingWorker(t, pool, worker.QueueConfig{Concurrency: 1,
		Fairness: worker.Fairness{Deadline: time.Minute}})
	require.Equal(t, map[int]int{jobs.PriorityLow: 1}, collect(t, started, 1))
}

// orderedParamNames are ClaimOrdered's parameters in order.
var orderedParamNames = []string{"seg_priority", "seg_after_us", "seg_min_age_us", "seg_max_age_us", "seg_limit", "seg_rank", "seg_quota",
	"queue", "kind_versions", "kinds", "scan", "batch", "worker_id", "kind_lease_ms"}

// strictArgs are ClaimOrdered's arguments (in db/queries.sql's order) for a strict-priority
// claim of batch noop jobs of queue "default" by workerID: one segment per band, 9..1, from
// after (each band's watermark, nil: from the start), every limit and quota the batch, ranks in
// serving order, scan = batch (the loop stops when the batch is full).
func strictArgs(after []int64, batch int, workerID string) []any {
	if after == nil {
		after = make([]int64, 9)
	}
	lim := []int32{}
	for range 9 {
		lim = append(lim, int32(batch))
	}
	return []any{[]int16{9, 8, 7, 6, 5, 4, 3, 2, 1}, after, make([]int64, 9),
		[]int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15}, lim, []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}, lim,
		"default", []int32{1}, []string{"noop"}, batch, batch, workerID, []int32{0}}
}

// claimSQL extracts a named query from db/queries.sql (the source of truth) and rewrites
// sqlc's named parameters into positional ones, in order of first appearance.
// TestClaimPlansUseThePartialIndex is docs/contract.md §10 scenario 10: both claim statements read the ready
// set through jobs_ready_idx, never scan the jobs table, and their cost does not grow with the
// number of finished rows. They own what they picked through tenure.own, whose UPDATE reads
// the rows by primary key, with generic and custom plans (plantest.OwnPlans).
func TestClaimPlansUseThePartialIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// A ready set large enough that a bad plan (a sequential scan or a hash join against the
	// whole table) is visibly worse than the index path.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, priority, run_at)
		SELECT 'noop', '{"n":0}', 2 + (g % 2), now() - interval '1 second' FROM generate_series(1, 100000) g`)
	require.NoError(t, err)

	type claimQuery struct {
		name string
		sql  string
		args []any
	}
	var queries []claimQuery
	for _, q := range []struct {
		name, label string
		args        []any
		want        []string
	}{
		{"ClaimStrict", "ClaimStrict", []any{"default", []int32{1}, []string{"noop"}, 10, "explain-worker", []int32{0}},
			[]string{"queue", "kind_versions", "kinds", "batch", "worker_id", "kind_lease_ms"}},
		{"ClaimOrdered", "ClaimOrdered (strict)", strictArgs(nil, 10, "explain-worker"), orderedParamNames},
		// Quotas and aging: every segment read up to its own limit, ranked by the statement.
		{"ClaimOrdered", "ClaimOrdered (ranked)", []any{
			[]int16{3, 2, 2, 1}, []int64{0, 0, 0, 0}, []int64{0, 0, 300e6, 0}, []int64{3e15, 300e6, 3e15, 3e15},
			[]int32{10, 10, 10, 10}, []int32{1, 2, 1, 3}, []int32{6, 4, 4, 0}, "default", []int32{1}, []string{"noop"}, 40, 10, "explain-worker", []int32{0},
		}, orderedParamNames},
	} {
		sql, order := plantest.SQL(t, q.name)
		require.Equal(t, q.want, order, q.name)
		queries = append(queries, claimQuery{q.label, sql, q.args})
	}

	buffers := func() []int64 {
		var b []int64
		for _, q := range queries {
			plan := plantest.ExplainEngine(t, pool, true, q.sql, q.args...)
			b = append(b, plan.SharedHit+plan.SharedRd)
		}
		return b
	}
	checkPlan := func() {
		for _, q := range queries {
			plan := plantest.ExplainEngine(t, pool, false, q.sql, q.args...)
			usesReady := false
			plantest.Walk(plan, func(n plantest.Node) {
				if n.IndexName == "jobs_ready_idx" {
					usesReady = true
				}
				require.NotEqual(t, "Hash Join", n.NodeType, "%s joins its picks against the whole table", q.name)
				require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "%s scans the jobs table", q.name)
				require.NotEqual(t, "Bitmap Heap Scan", n.NodeType, "%s should walk the index in order", q.name)
			})
			require.True(t, usesReady, "%s does not use jobs_ready_idx", q.name)
			plantest.OwnPlans(t, pool, q.sql, q.args...) // tenure.own reaches the picked rows by primary key
		}
	}
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	checkPlan()
	before := buffers()

	// 300,000 finished rows must not change the plans nor the claims' cost.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at)
		SELECT 'default', 'noop', '{"n":0}', 'succeeded', 1, now(), gen_random_uuid(), 1, now() FROM generate_series(1, 300000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	checkPlan()
	after := buffers()
	for i, q := range queries {
		t.Logf("%s buffers: %d before, %d with 300k finished rows", q.name, before[i], after[i])
		require.LessOrEqual(t, after[i], before[i]*2+20, q.name)
	}
}

// The watermark skips the index entries left behind by claimed rows: with a transaction
// holding back the xmin horizon (so nothing can be cleaned up), claiming 20,000 jobs leaves
// 20,000 dead entries at the front of the ready range. A claim that starts at the band's
// watermark reads a few pages; one that starts at the front reads them all.
func TestWatermarkSkipsDeadIndexEntries(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer hold.Rollback(ctx)
	_, err = hold.Exec(ctx, "SELECT txid_current()")
	require.NoError(t, err)

	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at)
		SELECT 'noop', '{"n":0}', now() - interval '1 hour' + g * interval '1 millisecond' FROM generate_series(1, 25000) g`)
	require.NoError(t, err)
	var mark time.Time
	require.NoError(t, pool.QueryRow(ctx, `WITH c AS (UPDATE tenure.jobs SET state='running', claim_token=gen_random_uuid(),
		locked_by='x', locked_until=now()+interval '1 minute', attempts=1, attempted_at=now()
		WHERE id IN (SELECT id FROM tenure.jobs ORDER BY run_at LIMIT 20000) RETURNING run_at) SELECT max(run_at) FROM c`).Scan(&mark))
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)

	sql, _ := plantest.SQL(t, "ClaimOrdered")
	claimFrom := func(afterUs int64) int64 {
		after := make([]int64, 9)
		after[9-jobs.PriorityNormal] = afterUs // bands are listed 9..1
		plan := plantest.ExplainEngine(t, pool, true, sql, strictArgs(after, 10, "w")...)
		return plan.SharedHit + plan.SharedRd
	}
	full, fromMark := claimFrom(0), claimFrom(mark.UnixMicro())
	t.Logf("claim of 10 behind 20,000 dead entries: %d buffers from the front, %d from the watermark", full, fromMark)
	require.Less(t, fromMark*3, full)
}

// A job that becomes ready behind the watermark (here: enqueued with a due time in the past,
// older than everything already claimed) is still found, by the periodic full scan.
func TestJobBehindWatermarkIsFound(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	seen := make(chan int, 100)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		seen <- job.Args.N
		return nil
	}, nil)
	c := newClient(t, pool, w)
	startWorker(t, w)
	_, err = c.Insert(ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, <-seen)
	_, err = c.Insert(ctx, noopArgs{N: 2}, &jobs.InsertOpts{RunAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	select {
	case n := <-seen:
		require.Equal(t, 2, n)
	case <-time.After(5 * time.Second):
		t.Fatal("a job due before the watermark was never claimed")
	}
}

// TestNotifiedJobBehindWatermarkFoundBeforeBackstop: while full claims find nothing behind
// the watermarks, the backstop's period doubles (1 s, 2 s, 4 s, ...). A job announced by a
// NOTIFY without a due-time hint (the payload of inserters before December 2026, or SQL that
// enqueues by hand) that the next watermark claim does not find (here: due an hour ago)
// triggers a full claim at once (at most one per second) instead of waiting for the
// backstop, and is counted as claimed behind the watermark.
func TestNotifiedJobBehindWatermarkFoundBeforeBackstop(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for the backstop's period to grow (~6 s)")
	}
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	seen := make(chan int, 100)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		seen <- job.Args.N
		return nil
	}, nil)
	c := newClient(t, pool, w)
	startWorker(t, w)
	_, err = c.Insert(ctx, noopArgs{N: 1}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, <-seen)
	// Full claims at t0 (the first claim), t0+2 s and t0+6 s; the next is due at t0+14 s.
	require.Eventually(t, func() bool { return w.Stats().FullClaims >= 3 }, 15*time.Second, 10*time.Millisecond)
	full := w.Stats().FullClaims
	// A job claimed after that full claim sets the watermark again.
	_, err = c.Insert(ctx, noopArgs{N: 3}, nil)
	require.NoError(t, err)
	require.Equal(t, 3, <-seen)
	t0 := time.Now()
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('noop', '{"n":2}', now() - interval '1 hour')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT pg_notify('tenure_jobs', 'default')`)
	require.NoError(t, err)
	select {
	case n := <-seen:
		require.Equal(t, 2, n)
	case <-time.After(4 * time.Second):
		t.Fatalf("a notified job behind the watermark waited for the backstop (full claims: %d)", w.Stats().FullClaims)
	}
	found := time.Since(t0)
	// The claim goroutine starts the handler before the loop records the claim: wait for the
	// loop to count it.
	waitFor(t, 5*time.Second, "the claim recorded", func() bool { return w.Stats().ClaimedBehindWatermark == 1 })
	st := w.Stats()
	t.Logf("found %v after its insert; full claims %d -> %d", found.Round(time.Millisecond), full, st.FullClaims)
	require.Equal(t, full+1, st.FullClaims, "one full claim, triggered by the NOTIFY")
}

// TestLateCommitFoundThroughNotifyHint: a job inserted by a transaction that commits after a
// newer job was claimed sits behind the band's watermark (its run_at is its transaction's
// start). Its NOTIFY carries its band and due time, so the next claim starts the band there:
// it runs at once, without a full claim.
func TestLateCommitFoundThroughNotifyHint(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	seen := make(chan int, 100)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		seen <- job.Args.N
		return nil
	}, nil)
	c := newClient(t, pool, w)
	startWorker(t, w)
	// Wait for the start-up full claim, so that the next one is at least a second away.
	require.Eventually(t, func() bool { return w.Stats().FullClaims >= 1 }, 5*time.Second, 5*time.Millisecond)

	late, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(ctx)
	_, err = c.InsertTx(ctx, late, noopArgs{N: 1}, nil) // run_at = this transaction's start
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	_, err = c.Insert(ctx, noopArgs{N: 2}, nil) // newer, committed first: moves the watermark
	require.NoError(t, err)
	require.Equal(t, 2, <-seen)
	full := w.Stats().FullClaims
	t0 := time.Now()
	require.NoError(t, late.Commit(ctx))
	select {
	case n := <-seen:
		require.Equal(t, 1, n)
	case <-time.After(5 * time.Second):
		t.Fatal("the late-committed job was not claimed")
	}
	st := w.Stats()
	t.Logf("late-committed job claimed %v after its commit; watermark hints %d, full claims %d -> %d",
		time.Since(t0).Round(time.Millisecond), st.WatermarkHints, full, st.FullClaims)
	require.Equal(t, full, st.FullClaims, "found by a full claim, not through the hint")
	require.GreaterOrEqual(t, st.WatermarkHints, int64(1))
	require.Zero(t, st.ClaimedBehindWatermark)
}

// TestClaimCostFlatWhileHorizonHeld: a REPEATABLE READ transaction holds the xmin horizon
// while 100,000 jobs are claimed, so their index entries stay in jobs_ready_idx as dead
// entries no claim can skip cheaply. The engine's claim (from the band's watermark) reads as
// many buffers after 100,000 claims as after 1,000; a claim from the start of the band (the
// full claim of the backstop, at most every 1–16 s) walks them all.
func TestClaimCostFlatWhileHorizonHeld(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("claims 100,000 jobs")
	}
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	reader, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer reader.Rollback(ctx)
	var n int64
	require.NoError(t, reader.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n)) // takes the snapshot

	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at)
		SELECT 'noop', '{"n":0}', now() - interval '1 hour' + g * interval '10 microseconds' FROM generate_series(1, 102000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	sql, _ := plantest.SQL(t, "ClaimOrdered")
	var mark int64 // the engine's watermark for the normal band: newest run_at claimed
	claim := func(batch int, afterUs int64) []time.Time {
		after := make([]int64, 9)
		after[9-jobs.PriorityNormal] = afterUs
		rows, err := pool.Query(ctx, sql, strictArgs(after, batch, "w")...)
		require.NoError(t, err)
		var out []time.Time
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			out = append(out, vals[6].(time.Time)) // run_at
		}
		require.NoError(t, rows.Err())
		return out
	}
	claimed := 0
	claimUpTo := func(total int) {
		for claimed < total {
			got := claim(min(1000, total-claimed), mark)
			require.NotEmpty(t, got)
			for _, r := range got {
				mark = max(mark, r.UnixMicro())
			}
			claimed += len(got)
		}
	}
	cost := func(afterUs int64) int64 {
		after := make([]int64, 9)
		after[9-jobs.PriorityNormal] = afterUs
		plan := plantest.ExplainEngine(t, pool, true, sql, strictArgs(after, 10, "w")...)
		return plan.Buffers()
	}
	claimUpTo(1000)
	at1k := cost(mark)
	claimUpTo(10000)
	at10k := cost(mark)
	claimUpTo(100000)
	at100k, fullAt100k := cost(mark), cost(0)
	t.Logf("claim of 10 (buffers) from the watermark after 1,000 / 10,000 / 100,000 dead entries: %d / %d / %d; from the start after 100,000: %d",
		at1k, at10k, at100k, fullAt100k)
	require.LessOrEqual(t, at100k, at1k+at1k/2+10, "the watermark claim's cost grew with the dead entries")
	require.Greater(t, fullAt100k, 10*at100k, "the held horizon did not keep the dead entries (the test measures nothing)")
}

// TestClaimSkipsFutureJobsOfHigherBands: 300,000 jobs scheduled for tomorrow at priority 3 and
// 10 due now at priority 2. The engine's claim (per-band segments: run_at bounds each band's
// range) reads a few hundred buffers; a single strict scan (ClaimStrict, not used by the
// engine) walks every future entry of the higher band first.
func TestClaimSkipsFutureJobsOfHigherBands(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("inserts 300,000 rows")
	}
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, priority, run_at)
		SELECT 'noop', '{"n":0}', 3, now() + interval '1 day' FROM generate_series(1, 300000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, priority, run_at)
		SELECT 'noop', '{"n":0}', 2, now() - interval '1 second' FROM generate_series(1, 10) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	kinds := []any{"default", []int32{1}, []string{"noop"}, 10, "w", []int32{0}}
	strictSQL, _ := plantest.SQL(t, "ClaimStrict")
	strict := plantest.ExplainEngine(t, pool, true, strictSQL, kinds...)
	orderedSQL, _ := plantest.SQL(t, "ClaimOrdered")
	ordered := plantest.ExplainEngine(t, pool, true, orderedSQL, strictArgs(nil, 10, "w")...)
	t.Logf("claim of 10 due jobs behind 300,000 future ones: ClaimOrdered %d buffers, ClaimStrict %d",
		ordered.SharedHit+ordered.SharedRd, strict.SharedHit+strict.SharedRd)
	require.Less(t, ordered.SharedHit+ordered.SharedRd, int64(400))
	require.Less(t, (ordered.SharedHit+ordered.SharedRd)*4, strict.SharedHit+strict.SharedRd)
}

// TestEngineStatementsPlanIndexPathsOnATinyTable: the engine's pool plans its statements once
// per connection, generically, and keeps the plan until the table's statistics change. Planned
// while tenure.jobs holds a few rows (a new deployment, a drained queue), a plan that reads the
// claimed or finished rows by a sequential scan would be kept as the table grows (measured in
// bench phases: claims of one job reading 1,700–3,600 buffers instead of ~32). Under the
// engine's settings (internal/engineconf) every engine statement reads tenure.jobs through an
// index at 0, 1 and 50 rows.
func TestEngineStatementsPlanIndexPathsOnATinyTable(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	ids, tokens := []int64{1, 2}, []uuid.UUID{uuid.New(), uuid.New()}
	stmts := map[string][]any{ // a name, and after a slash what the arguments make of it
		"ClaimOrdered": strictArgs(nil, 10, "w"),
		"ClaimOrdered/ranked": {[]int16{3, 2}, []int64{0, 0}, []int64{0, 0}, []int64{3e15, 3e15},
			[]int32{10, 10}, []int32{1, 2}, []int32{5, 5}, "default", []int32{1}, []string{"noop"}, 20, 10, "w", []int32{0}},
		"CompleteMany": {ids, tokens, [][]byte{[]byte("null"), []byte("null")}, [][]byte{[]byte("null"), []byte("null")}, []bool{true, false}},
		"Heartbeat":    {ids, tokens, [][]byte{[]byte("null"), []byte("null")}},
		"FailMany": {ids, tokens, []string{"ready", "dead"}, []int64{0, 0}, []string{"HANDLER_ERROR", "PERMANENT"},
			[]string{"m", "m"}, [][]byte{[]byte("null"), []byte("null")}, [][]byte{[]byte("null"), []byte("null")}},
		"ReleaseMany": {ids, tokens, []int64{0, 0}},
		"SnoozeMany":  {ids, tokens, []int64{1, 1}, []int64{0, 0}},
		"LockFinish":  {ids, tokens},
	}
	for _, total := range []int{0, 1, 50} {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) SELECT 'noop', '{"n":0}' FROM generate_series(1, $1::int)`, total)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
		require.NoError(t, err)
		for label, args := range stmts {
			name, _, _ := strings.Cut(label, "/")
			sql, _ := plantest.SQL(t, name)
			plan := plantest.ExplainEngine(t, pool, false, sql, args...)
			plantest.Walk(plan, func(nd plantest.Node) {
				require.False(t, nd.NodeType == "Seq Scan" && nd.Relation == "jobs", "%s reads tenure.jobs by a sequential scan at %d rows", label, total)
			})
			if strings.HasPrefix(name, "Claim") {
				// tenure.own's UPDATE, planned generically from these statistics, reads the
				// picked rows by primary key: not by walking jobs_ready_idx (which a drained
				// queue's statistics make look empty) whatever the ready set has grown to.
				plantest.OwnPlans(t, pool, sql, args...)
			}
		}
	}
}

// TestOrderedClaimLocksOnlyWhatItClaims: ClaimOrdered serves every policy since issue 28
// (ClaimSegments retired), and for an ordered policy (strict, aging) it must still lock no row
// it does not claim: the loop stops at scan = batch. A claim of 5 in an open transaction over
// three bands of 10 ready jobs; another session then finds exactly 5 ready rows locked. (A
// ranked claim of the same batch would lock every segment's candidates: shown for contrast.)
func TestOrderedClaimLocksOnlyWhatItClaims(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, priority, run_at)
		SELECT 'noop', '{"n":0}', 1 + g % 3, now() - interval '1 second' FROM generate_series(1, 30) g`)
	require.NoError(t, err)
	sql, _ := plantest.SQL(t, "ClaimOrdered")
	locked := func(args []any) (claimed, locked int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		rows, err := tx.Query(ctx, sql, args...)
		require.NoError(t, err)
		for rows.Next() {
			claimed++
		}
		require.NoError(t, rows.Err())
		var free int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT id FROM tenure.jobs WHERE state = 'ready' FOR UPDATE SKIP LOCKED) f`).Scan(&free))
		return claimed, 30 - free
	}
	claimed, n := locked(strictArgs(nil, 5, "w"))
	require.Equal(t, 5, claimed)
	require.Equal(t, 5, n, "the ordered claim locked rows it did not claim")

	// Ranked (quotas 1:1:1 over the three bands): each band read up to the batch, then ranked.
	five := []int32{5, 5, 5}
	claimed, n = locked([]any{[]int16{3, 2, 1}, make([]int64, 3), make([]int64, 3), []int64{3e15, 3e15, 3e15},
		five, []int32{1, 2, 3}, []int32{2, 2, 1}, "default", []int32{1}, []string{"noop"}, 15, 5, "w", []int32{0}})
	require.Equal(t, 5, claimed)
	t.Logf("ranked claim of 5: %d rows locked for the statement's moment", n)
	require.Equal(t, 15, n)
}

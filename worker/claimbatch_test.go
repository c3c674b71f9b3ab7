package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/engineconf"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// The claim batcher (claimbatch.go) carries the plain ordered claims of many queues in one
// statement (ClaimOrderedMany). These tests run real workers on real PostgreSQL.

func manyQueues(n, conc int) map[string]worker.QueueConfig {
	qs := map[string]worker.QueueConfig{}
	for i := range n {
		qs[fmt.Sprintf("q%03d", i)] = worker.QueueConfig{Concurrency: conc}
	}
	return qs
}

func insertPerQueue(t *testing.T, c *jobs.Client, queues map[string]worker.QueueConfig, per int, prio func(i int) int) int {
	t.Helper()
	var params []jobs.InsertManyParams
	for name := range queues {
		for i := range per {
			p := 0
			if prio != nil {
				p = prio(i)
			}
			params = append(params, jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Queue: name, Priority: p}})
		}
	}
	_, err := c.InsertMany(context.Background(), params)
	require.NoError(t, err)
	return len(params)
}

// 200 queues of one slot each: every job runs exactly once, no queue ever runs more handlers
// than its slots, and the claims travel together (statements carry many requests).
func TestClaimBatchManyQueuesDrainExactlyOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	qs := manyQueues(200, 1)
	qs["wide"] = worker.QueueConfig{Concurrency: 3}
	cfg := fastConfig(qs)
	cfg.EngineConns = 12 // batched claims need no connection per queue
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var runs sync.Map
	var mu sync.Mutex
	cur, peak := map[string]int{}, map[string]int{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		cur[job.Queue]++
		peak[job.Queue] = max(peak[job.Queue], cur[job.Queue])
		mu.Unlock()
		time.Sleep(time.Millisecond)
		v, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		mu.Lock()
		cur[job.Queue]--
		mu.Unlock()
		return nil
	}, nil)
	total := insertPerQueue(t, newClient(t, pool, w), qs, 5, nil)
	startWorker(t, w)
	waitFor(t, 90*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	n := 0
	runs.Range(func(_, v any) bool {
		require.EqualValues(t, 1, v.(*atomic.Int64).Load())
		n++
		return true
	})
	require.Equal(t, total, n)
	require.Zero(t, countState(t, pool, "running"))
	for name, c := range qs {
		require.LessOrEqual(t, peak[name], c.Concurrency, "queue %s ran more handlers than its slots", name)
	}
	var bad int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.jobs WHERE generation <> 1 OR attempts <> 1").Scan(&bad))
	require.Zero(t, bad)
	stmts, reqs := worker.ClaimBatchStats(w)
	t.Logf("%d batched statements carried %d requests (%.1f each); %d jobs", stmts, reqs, float64(reqs)/float64(max(stmts, 1)), total)
	require.Positive(t, stmts)
	require.Greater(t, reqs, 2*stmts, "claims of many queues should share statements")
}

// Strict priority holds within each queue under batching: with one slot per queue every job
// of a queue runs after every job of a higher band of that queue (all due before the start).
func TestClaimBatchStrictPriorityPerQueue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	qs := manyQueues(20, 1)
	w, err := worker.New(pool, fastConfig(qs))
	require.NoError(t, err)
	var mu sync.Mutex
	order := map[string][]int{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		order[job.Queue] = append(order[job.Queue], job.Priority)
		mu.Unlock()
		return nil
	}, nil)
	// Bands interleaved in insertion order: 1, 5, 9, 3, 7, ...
	total := insertPerQueue(t, newClient(t, pool, w), qs, 20, func(i int) int { return 1 + (i*4)%9 })
	startWorker(t, w)
	waitFor(t, 60*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	mu.Lock()
	defer mu.Unlock()
	for name, got := range order {
		require.Len(t, got, 20, name)
		for i := 1; i < len(got); i++ {
			require.GreaterOrEqual(t, got[i-1], got[i], "queue %s ran priorities %v", name, got)
		}
	}
	stmts, reqs := worker.ClaimBatchStats(w)
	require.Greater(t, reqs, stmts, "claims should have shared statements")
}

// Fairness between queues: a busy queue with a deep backlog and many slots does not hold back
// the claims of small queues. Each statement carries at most one request per queue and a
// request's rows are bounded by its own queue's free slots, so the small queues drain while
// the busy one still has most of its backlog.
func TestClaimBatchBusyQueueDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	small := manyQueues(30, 1)
	qs := manyQueues(30, 1)
	qs["busy"] = worker.QueueConfig{Concurrency: 20}
	cfg := fastConfig(qs)
	cfg.EngineConns = 12
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		if job.Queue == "busy" {
			time.Sleep(5 * time.Millisecond)
		}
		return nil
	}, nil)
	c := newClient(t, pool, w)
	nSmall := insertPerQueue(t, c, small, 3, nil)
	const busy = 20000
	params := make([]jobs.InsertManyParams, busy)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: noopArgs{N: i}, Opts: &jobs.InsertOpts{Queue: "busy"}}
	}
	_, err = c.InsertMany(context.Background(), params)
	require.NoError(t, err)
	startWorker(t, w)
	ctx := context.Background()
	smallDone := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue <> 'busy' AND state = 'succeeded'").Scan(&n))
		return n
	}
	waitFor(t, 60*time.Second, "the small queues drained", func() bool { return smallDone() == nSmall })
	var busyLeft int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE queue = 'busy' AND state = 'ready'").Scan(&busyLeft))
	t.Logf("small queues drained with %d of %d busy jobs still ready", busyLeft, busy)
	require.Greater(t, busyLeft, busy/2, "the small queues waited for the busy one")
}

// waitBlockedClaim waits until a ClaimOrderedMany statement waits for a lock; it returns the
// backend pids running one.
func waitBlockedClaim(t *testing.T, pool *pgxpool.Pool) []int32 {
	t.Helper()
	var pids []int32
	waitFor(t, 20*time.Second, "a batched claim waiting for the lock", func() bool {
		pids = nil
		rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND query LIKE '-- name: ClaimOrderedMany%' AND state = 'active' AND wait_event_type = 'Lock'`)
		require.NoError(t, err)
		for rows.Next() {
			var p int32
			require.NoError(t, rows.Scan(&p))
			pids = append(pids, p)
		}
		require.NoError(t, rows.Err())
		return len(pids) > 0
	})
	return pids
}

// A batched statement that fails (its backend terminated) fails every request in it, loses
// nothing, and the loops recover: every job still runs exactly once.
func TestClaimBatchTerminatedStatementLosesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	qs := manyQueues(40, 1)
	cfg := fastConfig(qs)
	cfg.EngineConns = 12
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var runs sync.Map
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		v, _ := runs.LoadOrStore(job.ID, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		return nil
	}, nil)
	total := insertPerQueue(t, newClient(t, pool, w), qs, 3, nil)
	// Hold the claims back behind a table lock, then kill the statements waiting for it.
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, "LOCK TABLE tenure.jobs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	startWorker(t, w)
	for _, pid := range waitBlockedClaim(t, pool) {
		_, err = pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		require.NoError(t, err)
	}
	waitFor(t, 10*time.Second, "the claim errors reported", func() bool { return w.Stats().ClaimErrors > 0 })
	require.NoError(t, hold.Rollback(ctx))
	waitFor(t, 60*time.Second, "all succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	n := 0
	runs.Range(func(_, v any) bool {
		require.EqualValues(t, 1, v.(*atomic.Int64).Load())
		n++
		return true
	})
	require.Equal(t, total, n)
	var bad int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE generation <> 1 OR attempts <> 1").Scan(&bad))
	require.Zero(t, bad, "a terminated claim rolled back: it charged no attempt")
}

// Stop while batched claims are in flight and pending: the statements land after Stop began
// (the lock they wait for is released then); what they claimed is given back, nothing stays
// running, and no attempt is charged for it.
func TestClaimBatchStopWhilePendingStrandsNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	qs := manyQueues(60, 1)
	cfg := fastConfig(qs)
	cfg.EngineConns = 12
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	total := insertPerQueue(t, newClient(t, pool, w), qs, 2, nil)
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, "LOCK TABLE tenure.jobs IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	waitBlockedClaim(t, pool)
	stopped := make(chan error, 1)
	go func() { stopped <- stopWorker(t, w, 10*time.Second) }()
	time.Sleep(200 * time.Millisecond) // Stop has begun: the loops claim no more
	require.NoError(t, hold.Rollback(ctx))
	require.NoError(t, <-stopped)
	require.Zero(t, countState(t, pool, "running"))
	require.Equal(t, total, countState(t, pool, "ready")+countState(t, pool, "succeeded"))
	var charged int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND attempts <> 0").Scan(&charged))
	require.Zero(t, charged, "jobs claimed after Stop began are given back without charging the attempt")
	st := w.Stats()
	t.Logf("claimed %d, released %d, succeeded %d", st.Claimed, st.Released, st.Succeeded)
	require.Positive(t, st.Claimed, "the blocked statements landed after Stop began")
}

// ClaimOrderedMany reads every request's segments through jobs_ready_idx and reaches the
// picked rows by primary key, under the engine's generic plan and under custom plans, on a
// large ready set and on a tiny table.
func TestClaimOrderedManyPlanUsesTheReadyIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	sql, order := plantest.SQL(t, "ClaimOrderedMany")
	require.Equal(t, []string{"req_batch", "req_seg_lo", "req_seg_hi", "req_queue", "seg_priority", "seg_after_us",
		"seg_min_age_us", "seg_max_age_us", "kind_versions", "kinds", "worker_id", "kind_lease_ms"}, order)
	nine := []int64{3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15, 3e15}
	var queues []string
	var batch, lo, hi []int32
	var prio []int16
	var after, minAge, maxAge []int64
	for i := range 50 {
		queues = append(queues, fmt.Sprintf("q%03d", i))
		batch = append(batch, 2)
		lo = append(lo, int32(len(prio)+1))
		prio = append(prio, 9, 8, 7, 6, 5, 4, 3, 2, 1)
		after = append(after, make([]int64, 9)...)
		minAge = append(minAge, make([]int64, 9)...)
		maxAge = append(maxAge, nine...)
		hi = append(hi, int32(len(prio)))
	}
	args := []any{batch, lo, hi, queues, prio, after, minAge, maxAge, []int32{1}, []string{"noop"}, "explain-worker", []int32{0}}
	check := func(what string, plan plantest.Node) {
		t.Helper()
		usesReady := false
		var walk func(n plantest.Node)
		walk = func(n plantest.Node) {
			if n.IndexName == "jobs_ready_idx" {
				usesReady = true
			}
			require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "%s scans the jobs table", what)
			require.NotEqual(t, "Bitmap Heap Scan", n.NodeType, "%s should walk the index in order", what)
			if n.NodeType == "Hash Join" || n.NodeType == "Merge Join" || n.NodeType == "Nested Loop" {
				// Only the claimed rows are joined to their requests (CTE scans), never the
				// table (the CTEs' own plans hang off the same node: skip them).
				for _, c := range n.Plans {
					if c.NodeType == "CTE Scan" || c.NodeType == "Hash" || c.NodeType == "Sort" {
						plantest.Walk(c, func(c plantest.Node) {
							require.False(t, c.Relation == "jobs" && c.NodeType != "Index Scan", "%s joins against the jobs table", what)
						})
					}
				}
			}
			for _, c := range n.Plans {
				walk(c)
			}
		}
		walk(plan)
		require.True(t, usesReady, "%s does not use jobs_ready_idx", what)
	}
	// explain plans the statement as the engine runs it: prepared (a named statement, as pgx
	// prepares every engine statement), under the engine's settings, in mode (generic or
	// custom plans).
	prepared := 0
	explain := func(mode string, analyze bool) plantest.Node {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		for k, v := range engineconf.Settings {
			_, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v)
			require.NoError(t, err)
		}
		_, err = tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode)
		require.NoError(t, err)
		// As the batcher runs it (claimbatch.go, noBitmap).
		_, err = tx.Exec(ctx, "SELECT set_config('enable_bitmapscan', 'off', true)")
		require.NoError(t, err)
		prepared++
		name := fmt.Sprintf("claim_many_%d", prepared)
		_, err = tx.Exec(ctx, "PREPARE "+name+" AS "+sql)
		require.NoError(t, err)
		defer tx.Exec(ctx, "DEALLOCATE "+name)
		ps := make([]string, len(args))
		for i, a := range args {
			ps[i] = sqlLiteral(a)
		}
		opts := "FORMAT JSON"
		if analyze {
			opts = "ANALYZE, BUFFERS, FORMAT JSON"
		}
		var out []plantestPlan
		require.NoError(t, tx.QueryRow(ctx, "EXPLAIN ("+opts+") EXECUTE "+name+"("+strings.Join(ps, ", ")+")").Scan(&out))
		return out[0].Plan
	}
	for _, total := range []int{0, 1, 50} { // a tiny table: the plans must not settle on scans
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) SELECT 'noop', '{"n":0}' FROM generate_series(1, $1::int)`, total)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
		require.NoError(t, err)
		plan := explain("force_generic_plan", false)
		plantest.Walk(plan, func(n plantest.Node) {
			require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "generic plan scans tenure.jobs at %d rows", total)
		})
	}
	// Many queues of a few hundred ready jobs each (the queues sweep's shape): without
	// noBitmap the generic plan estimates one row per probe and reads every ready job of the
	// band through a bitmap scan and a sort, instead of walking jobs_ready_idx in order.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, run_at)
		SELECT 'q' || lpad((g % 100)::text, 3, '0'), 'noop', '{"n":0}', now() - interval '1 minute' + g * interval '1 microsecond'
		FROM generate_series(1, 40000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	plantest.OwnPlans(t, pool, sql, args...) // tenure.own reaches the picked rows by primary key
	check("generic", explain("force_generic_plan", false))
	check("custom", explain("force_custom_plan", false))
	run := explain("force_generic_plan", true)
	check("generic (analyze)", run)
	t.Logf("claim of 2 jobs for each of 50 queues: %d buffers", run.SharedHit+run.SharedRd)
	// 60 pages per request, plus one buffer hit per owned row: the UPDATE re-reads each old row
	// version for the AFTER ROW trigger of migration 0020 (jobs_settle_dependents), whose WHEN
	// then finds nothing to do (2,917 buffers before that trigger, 3,026 with it).
	require.Less(t, run.SharedHit+run.SharedRd, int64(50*60+100), "the statement reads more than a few pages per request")
}

type plantestPlan struct {
	Plan plantest.Node `json:"Plan"`
}

// sqlLiteral writes a plan test's argument as an SQL literal (EXPLAIN EXECUTE takes no
// parameters).
func sqlLiteral(v any) string {
	join := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return "ARRAY[" + strings.Join(parts, ",") + "]"
	}
	switch v := v.(type) {
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case []string:
		return join(len(v), func(i int) string { return sqlLiteral(v[i]) }) + "::text[]"
	case []int16:
		return join(len(v), func(i int) string { return fmt.Sprint(v[i]) }) + "::smallint[]"
	case []int32:
		return join(len(v), func(i int) string { return fmt.Sprint(v[i]) }) + "::integer[]"
	case []int64:
		return join(len(v), func(i int) string { return fmt.Sprint(v[i]) }) + "::bigint[]"
	}
	panic(fmt.Sprintf("sqlLiteral: %T", v))
}

// A worker serving many queues heartbeats each queue's jobs with its own statement (every
// queue at once after the listener connects), so the statement must read its own jobs by id,
// never walk every running job of the table: with statistics taken while nothing ran (a
// backlog analyzed before the workers started), the generic plan walked jobs_running_idx
// (locked_until > now()) over every running row for each queue's heartbeat — O(queues ×
// running jobs) at every listener (re)connect (the queues sweep at 1,000 queues: 1,000
// heartbeats of 550 buffers each).
func TestHeartbeatReadsOnlyItsJobsAmongManyRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload)
		SELECT 'q' || (g % 1000), 'noop', '{"n":0}' FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "VACUUM (ANALYZE) tenure.jobs")
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `UPDATE tenure.jobs SET state = 'running', claim_token = gen_random_uuid(),
		locked_until = now() + interval '30 seconds', locked_by = 'w', attempted_at = now(), attempts = 1, generation = 1
		WHERE id IN (SELECT id FROM tenure.jobs ORDER BY id LIMIT 2000) RETURNING id, claim_token`)
	require.NoError(t, err)
	var ids []int64
	var tokens []uuid.UUID
	for rows.Next() {
		var id int64
		var tok uuid.UUID
		require.NoError(t, rows.Scan(&id, &tok))
		ids, tokens = append(ids, id), append(tokens, tok)
	}
	require.NoError(t, rows.Err())
	sql, _ := plantest.SQL(t, "Heartbeat")
	plan := plantest.ExplainEngine(t, pool, true, sql, ids[:2], tokens[:2], [][]byte{[]byte("null"), []byte("null")})
	require.False(t, plantest.Indexes(plan)["jobs_running_idx"], "the heartbeat walks every running job")
	t.Logf("heartbeat of 2 jobs among %d running: %d buffers", len(ids), plan.SharedHit+plan.SharedRd)
	require.Less(t, plan.SharedHit+plan.SharedRd, int64(100), "the heartbeat of 2 jobs reads more than their pages")
}

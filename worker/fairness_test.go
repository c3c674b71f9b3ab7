package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
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

// claimSQL extracts a named query from db/queries.sql (the source of truth) and rewrites
// sqlc's named parameters into positional ones, in order of first appearance.
func claimSQL(t testing.TB, name string) (string, []string) {
	t.Helper()
	raw, err := os.ReadFile("../db/queries.sql")
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "-- name: "+name+" ")
	require.GreaterOrEqual(t, start, 0)
	body := text[start:]
	body = body[strings.Index(body, "\n")+1:]
	if end := strings.Index(body, "-- name: "); end >= 0 {
		body = body[:end]
	}
	var order []string
	pos := map[string]int{}
	re := regexp.MustCompile(`sqlc\.arg\((\w+)\)|@(\w+)`)
	body = re.ReplaceAllStringFunc(body, func(m string) string {
		sub := re.FindStringSubmatch(m)
		n := sub[1] + sub[2]
		if _, ok := pos[n]; !ok {
			order = append(order, n)
			pos[n] = len(order)
		}
		return fmt.Sprintf("$%d", pos[n])
	})
	return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), ";")), order
}

type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	Relation  string     `json:"Relation Name"`
	Plans     []planNode `json:"Plans"`
	SharedHit int64      `json:"Shared Hit Blocks"`
	SharedRd  int64      `json:"Shared Read Blocks"`
}

func walk(n planNode, f func(planNode)) {
	f(n)
	for _, c := range n.Plans {
		walk(c, f)
	}
}

func explain(t *testing.T, pool *pgxpool.Pool, analyze bool, sql string, args ...any) planNode {
	t.Helper()
	opts := "FORMAT JSON"
	if analyze {
		opts = "ANALYZE, BUFFERS, FORMAT JSON"
	}
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // EXPLAIN ANALYZE runs the claim: never commit it
	_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN ("+opts+") "+sql, args...).Scan(&out))
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	return plans[0].Plan
}

// TestClaimPlansUseThePartialIndex is SPEC scenario 10: both claim statements read the ready
// set through jobs_ready_idx, never scan the jobs table, and their cost does not grow with the
// number of finished rows.
func TestClaimPlansUseThePartialIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	// A ready set large enough that a bad plan (a sequential scan or a hash join against the
	// whole table) is visibly worse than the index path.
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, priority, run_at)
		SELECT 'noop', '{"n":0}', 2 + (g % 2), now() - interval '1 second' FROM generate_series(1, 100000) g`)
	require.NoError(t, err)

	strictSQL, _ := claimSQL(t, "ClaimStrict")
	segSQL, _ := claimSQL(t, "ClaimSegments")
	strictArgs := []any{"default", 10, "explain-worker"}
	segArgs := []any{
		[]int16{3, 2, 2, 1}, []int64{0, 0, 300e6, 0}, []int64{3e15, 300e6, 3e15, 3e15},
		[]int32{10, 10, 10, 10}, []int32{1, 2, 1, 3}, []int32{6, 4, 4, 0}, "default", 10, "explain-worker",
	}
	_, segOrder := claimSQL(t, "ClaimSegments")
	require.Equal(t, []string{"seg_priority", "seg_min_age_us", "seg_max_age_us", "seg_limit", "seg_rank", "seg_quota", "queue", "batch", "worker_id"}, segOrder)

	buffers := func() (int64, int64) {
		var b [2]int64
		for i, q := range []struct {
			sql  string
			args []any
		}{{strictSQL, strictArgs}, {segSQL, segArgs}} {
			plan := explain(t, pool, true, q.sql, q.args...)
			b[i] = plan.SharedHit + plan.SharedRd
		}
		return b[0], b[1]
	}
	checkPlan := func() {
		for _, q := range []struct {
			name string
			sql  string
			args []any
		}{{"strict", strictSQL, strictArgs}, {"segments", segSQL, segArgs}} {
			plan := explain(t, pool, false, q.sql, q.args...)
			usesReady, usesPkey := false, false
			walk(plan, func(n planNode) {
				if n.IndexName == "jobs_ready_idx" {
					usesReady = true
				}
				if n.IndexName == "jobs_pkey" {
					usesPkey = true
				}
				require.NotEqual(t, "Hash Join", n.NodeType, "%s claim joins its picks against the whole table", q.name)
				require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "%s claim scans the jobs table", q.name)
				require.NotEqual(t, "Bitmap Heap Scan", n.NodeType, "%s claim should walk the index in order", q.name)
			})
			require.True(t, usesReady, "%s claim does not use jobs_ready_idx", q.name)
			require.True(t, usesPkey, "%s claim does not reach the picked rows by primary key", q.name)
		}
	}
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	checkPlan()
	strictBefore, segBefore := buffers()

	// 300,000 finished rows must not change the plan nor the claim's cost.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, attempted_at, claim_token, generation, finished_at)
		SELECT 'default', 'noop', '{"n":0}', 'succeeded', 1, now(), gen_random_uuid(), 1, now() FROM generate_series(1, 300000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)
	checkPlan()
	strictAfter, segAfter := buffers()
	t.Logf("claim buffers (strict, segments): before %d, %d; after 300k finished rows %d, %d", strictBefore, segBefore, strictAfter, segAfter)
	require.LessOrEqual(t, strictAfter, strictBefore*2+20)
	require.LessOrEqual(t, segAfter, segBefore*2+20)
}

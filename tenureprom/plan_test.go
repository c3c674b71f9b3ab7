package tenureprom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/tenureprom"
)

// sqlRecorder is a pgx tracer that records the SQL of every statement run.
type sqlRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.seen = append(r.seen, d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *sqlRecorder) statements() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// fill inserts ready, running, dead and finished jobs in bulk, then ANALYZEs.
func fill(t testing.TB, pool *pgxpool.Pool, ready, running, dead, finished int) {
	t.Helper()
	ctx := context.Background()
	for _, st := range []struct {
		sql string
		n   int
	}{
		{`INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at)
SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 1 + i % 3, now() - i * interval '1 millisecond'
FROM generate_series(1, $1::int) i`, ready},
		{`INSERT INTO tenure.jobs (queue, kind, payload, priority, state, attempts, locked_by, locked_until, claim_token, attempted_at, generation)
SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 2, 'running', 1, 'w', now() + interval '30 seconds', gen_random_uuid(), now(), 1
FROM generate_series(1, $1::int) i`, running},
		{`INSERT INTO tenure.jobs (queue, kind, payload, priority, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 2, 'dead', 1, 1, gen_random_uuid(), 1, now(), now(), 'CODE_' || chr(65 + i % 5)
FROM generate_series(1, $1::int) i`, dead},
		{`INSERT INTO tenure.jobs (queue, kind, payload, priority, state, attempts, claim_token, generation, attempted_at, finished_at)
SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 2, CASE WHEN i % 10 = 0 THEN 'cancelled' ELSE 'succeeded' END::tenure.job_state,
       1, gen_random_uuid(), 1, now(), now() - (i % 3600) * interval '1 second'
FROM generate_series(1, $1::int) i`, finished},
	} {
		_, err := pool.Exec(ctx, st.sql, st.n)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `ANALYZE tenure.jobs`)
	require.NoError(t, err)
}

// TestClusterPlansUseThePartialIndexes: with many finished rows and few live ones, every
// cluster statement reads its partial index, never the whole table. What it asserts is what
// matters on any server (the index is in the plan, no sequential scan of tenure.jobs), not the
// scan type: after a VACUUM the counts are index-only scans on the development server, while a
// fresh throwaway cluster's planner may prefer a bitmap heap scan of the same index. The plans
// are checked under the planner settings of planShapes, so the test holds whichever of those
// paths a server picks.
func TestClusterPlansUseThePartialIndexes(t *testing.T) {
	t.Parallel()
	rec := &sqlRecorder{}
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	fill(t, pool, 2000, 50, 500, 200_000)
	_, err := pool.Exec(context.Background(), `INSERT INTO tenure.jobs (queue, kind, payload, state, deps_pending, workflow_id, task_name)
		SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 'waiting', 1, gen_random_uuid(), 't' FROM generate_series(1, 300) i`)
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	col, err := tenureprom.NewClusterCollector(pool, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	_, err = reg.Gather()
	require.NoError(t, err)

	want := map[string]string{"ClusterReady": "jobs_ready_idx", "ClusterRunning": "jobs_running_idx", "ClusterDead": "jobs_dead_idx",
		"ClusterWaiting": "jobs_waiting_idx"}
	found := map[string]bool{}
	for _, sql := range rec.statements() {
		for name, idx := range want {
			if !strings.HasPrefix(sql, "-- name: "+name+" ") {
				continue
			}
			found[name] = true
			for _, settings := range planShapes {
				plan := explainWith(t, pool, settings, sql)
				requirePlanUsesIndex(t, plan, idx, "%s with %v", name, settings)
			}
		}
	}
	require.Len(t, found, len(want), "statements seen: %q", rec.statements())
}

// planShapes are planner settings under which a server plans a count over a partial index
// differently: its own choice (an index-only scan once VACUUM has set the visibility map; a
// fresh throwaway cluster has picked a bitmap heap scan), index-only scans ruled out (the plan
// of a table whose visibility map lags behind its writes), and SSD-tuned random I/O costs.
// Shapes that rule out the bitmap scan as well are not among them: with only a plain index
// scan left, a parallel sequential scan is a fair choice for the planner on some servers, and
// no server runs with them.
var planShapes = []map[string]string{
	{},
	{"enable_indexonlyscan": "off"},
	{"random_page_cost": "1.1"},
}

// explainWith returns sql's plan (EXPLAIN (FORMAT JSON)) under the given planner settings,
// set for one transaction that is rolled back.
func explainWith(t *testing.T, pool *pgxpool.Pool, settings map[string]string, sql string) plantest.Node {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for k, v := range settings {
		_, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", k, v)
		require.NoError(t, err)
	}
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql).Scan(&out))
	var plans []struct {
		Plan plantest.Node `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.NotEmpty(t, plans)
	return plans[0].Plan
}

// requirePlanUsesIndex fails when planProblem finds one.
func requirePlanUsesIndex(t *testing.T, plan plantest.Node, idx string, msgAndArgs ...any) {
	t.Helper()
	if p := planProblem(plan, idx); p != "" {
		raw, _ := json.MarshalIndent(plan, "", "  ")
		t.Fatalf("%s: %s\n%s", fmt.Sprintf(msgAndArgs[0].(string), msgAndArgs[1:]...), p, raw)
	}
}

// planProblem says what is wrong with plan, or "": it must read idx (by any index path: index
// scan, index-only scan or bitmap index scan) and read tenure.jobs by no sequential scan.
func planProblem(plan plantest.Node, idx string) string {
	seq := false
	plantest.Walk(plan, func(n plantest.Node) { seq = seq || n.NodeType == "Seq Scan" && n.Relation == "jobs" })
	switch {
	case seq:
		return "a sequential scan of tenure.jobs"
	case !plantest.Indexes(plan)[idx]:
		return "does not read " + idx
	}
	return ""
}

// TestPlanProblemDetects: the plan check above accepts each index path to the named index and
// refuses a plan without it or with a sequential scan of the jobs table.
func TestPlanProblemDetects(t *testing.T) {
	leaf := func(typ, rel, idx string) plantest.Node {
		return plantest.Node{NodeType: typ, Relation: rel, IndexName: idx}
	}
	agg := func(children ...plantest.Node) plantest.Node {
		return plantest.Node{NodeType: "Aggregate", Plans: children}
	}
	bitmap := plantest.Node{NodeType: "Bitmap Heap Scan", Relation: "jobs", Plans: []plantest.Node{leaf("Bitmap Index Scan", "", "jobs_ready_idx")}}
	for _, ok := range []plantest.Node{
		agg(leaf("Index Only Scan", "jobs", "jobs_ready_idx")),
		agg(leaf("Index Scan", "jobs", "jobs_ready_idx")),
		agg(bitmap),
		agg(bitmap, leaf("Seq Scan", "queues", "")),
	} {
		require.Empty(t, planProblem(ok, "jobs_ready_idx"), "%+v", ok)
	}
	for _, bad := range []plantest.Node{
		agg(leaf("Seq Scan", "jobs", "")),
		agg(leaf("Index Only Scan", "jobs", "jobs_pkey")),
		agg(leaf("Index Scan", "jobs", "jobs_ready_idx"), leaf("Seq Scan", "jobs", "")),
	} {
		require.NotEmpty(t, planProblem(bad, "jobs_ready_idx"), "%+v", bad)
	}
}

// TestClusterScrapeAtScale measures the cluster collector with a large backlog and many
// finished rows. Opt-in (slow to set up): TENURE_SCRAPE_SCALE=1 go test -run
// TestClusterScrapeAtScale -v -timeout 30m ./tenureprom/. Sizes: TENURE_SCRAPE_READY (default
// 1,000,000) ready jobs and TENURE_SCRAPE_FINISHED (default 10,000,000) finished ones, plus
// 200 running and 20,000 dead. The table is VACUUM ANALYZEd after loading, as autovacuum
// would in production (this test's server may run without it): the counts are index-only
// scans, which read the heap for pages not marked all-visible. It logs, per phase: a
// refresh's duration (every scrape waits for its statements: Wait < 0), the scrape duration
// with the default Wait when every scrape starts a refresh (MaxAge < 0), and each statement's
// EXPLAIN (ANALYZE, BUFFERS).
func TestClusterScrapeAtScale(t *testing.T) {
	if os.Getenv("TENURE_SCRAPE_SCALE") == "" {
		t.Skip("set TENURE_SCRAPE_SCALE=1 to run")
	}
	ready, finished := envInt(t, "TENURE_SCRAPE_READY", 1_000_000), envInt(t, "TENURE_SCRAPE_FINISHED", 10_000_000)
	rec := &sqlRecorder{}
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	ctx := context.Background()
	start := time.Now()
	fill(t, pool, ready, 200, 20_000, finished)
	t.Logf("setup: %d ready, 200 running, 20000 dead, %d finished in %v", ready, finished, time.Since(start).Round(time.Second))
	_, err := pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	gather := func(cfg *tenureprom.ClusterConfig) func() time.Duration {
		col, err := tenureprom.NewClusterCollector(pool, cfg)
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(col))
		return func() time.Duration {
			s := time.Now()
			fams, err := reg.Gather()
			require.NoError(t, err)
			took := time.Since(s)
			n := 0
			for _, f := range fams {
				if f.GetName() == "tenure_queue_jobs" {
					n = len(f.GetMetric())
				}
			}
			require.Positive(t, n, "no tenure_queue_jobs series")
			return took
		}
	}
	measure := func(what string) {
		// Refresh cost: every scrape runs the statements and waits for them.
		waiting := gather(&tenureprom.ClusterConfig{Timeout: time.Minute, MaxAge: -1, Wait: -1})
		var took []time.Duration
		for range 5 {
			took = append(took, waiting().Round(time.Millisecond))
		}
		t.Logf("%s: refresh (scrape waiting for the statements) %v", what, took)
		// Scrape latency with the defaults but MaxAge < 0: every scrape starts a refresh and
		// waits for it at most Wait (25ms), else serves the previous snapshot.
		def := gather(&tenureprom.ClusterConfig{Timeout: time.Minute, MaxAge: -1})
		first := def().Round(time.Millisecond)
		took = took[:0]
		for range 5 {
			took = append(took, def().Round(100*time.Microsecond))
		}
		t.Logf("%s: scrape with the default Wait: first %v (no snapshot yet: waits), then %v", what, first, took)
		time.Sleep(2 * time.Second) // let the last background refresh end
		seen := map[string]bool{}
		for _, sql := range rec.statements() {
			name := strings.SplitN(sql, "\n", 2)[0]
			if !strings.HasPrefix(sql, "-- name: ") || seen[name] {
				continue
			}
			seen[name] = true
			var plan []string
			rows, err := pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql)
			require.NoError(t, err)
			for rows.Next() {
				var l string
				require.NoError(t, rows.Scan(&l))
				plan = append(plan, l)
			}
			require.NoError(t, rows.Err())
			t.Logf("%s: %s\n%s", what, name, strings.Join(plan, "\n"))
		}
	}
	measure("with the finished rows")
	// Churn: ready rows inserted since the last VACUUM sit on pages not all-visible; the
	// index-only scan reads those heap pages.
	_, err = pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at)
SELECT 'q' || (i % 4), 'k' || (i % 8), '{}', 1 + i % 3, now() - i * interval '1 millisecond'
FROM generate_series(1, 50000) i`)
	require.NoError(t, err)
	measure("50,000 more ready rows since the last VACUUM")
	_, err = pool.Exec(ctx, `DELETE FROM tenure.jobs WHERE finished_at IS NOT NULL AND state <> 'dead'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	measure("without the finished rows")
}

func envInt(t testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var n int
	for _, c := range v {
		require.True(t, c >= '0' && c <= '9', "%s=%q", name, v)
		n = n*10 + int(c-'0')
	}
	return n
}

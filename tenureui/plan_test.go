package tenureui_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
)

// uiQueries holds the dashboard's own statements (package internal/uidb).
const uiQueries = "internal/uidb/queries.sql"

// TestDashboardPlansUseIndexes runs EXPLAIN (generic plans) on each dashboard statement of
// internal/uidb/queries.sql (and on the core's UnservedJobs, which jobs.Client.Unserved runs)
// over a table dominated by finished rows, as in production: each statement reads the index it
// was written for and none scans the jobs table; the window list reads no more buffers with a
// filter that matches nothing than the window holds.
func TestDashboardPlansUseIndexes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at, attempted_at, attempts)
		 SELECT 'q' || (g % 4), 'k' || (g % 7), jsonb_build_object('n', g), 'succeeded',
		        now() - (g || ' seconds')::interval, now() - (g || ' seconds')::interval, 1
		 FROM generate_series(1, 200000) g`,
		`INSERT INTO tenure.jobs (queue, kind, payload, state, finished_at, attempts, last_error_code)
		 SELECT 'q' || (g % 4), 'k' || (g % 7), '{}', 'dead', now(), 1, 'TIMEOUT' FROM generate_series(1, 300) g`,
		`INSERT INTO tenure.jobs (queue, kind, payload) SELECT 'q' || (g % 4), 'k' || (g % 7), '{}' FROM generate_series(1, 1000) g`,
		`INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, locked_by, locked_until, claim_token, attempted_at, generation)
		 SELECT 'q1', 'k1', '{}', 'running', 1, 'w', now() + interval '1 minute', gen_random_uuid(), now(), 1 FROM generate_series(1, 50) g`,
		`INSERT INTO tenure.effects (key, job_id, name, generation, result)
		 SELECT 'job:' || g || ':effect:e', g, 'e', 1, '{}' FROM generate_series(1, 20000) g`,
		`ANALYZE tenure.jobs`, `ANALYZE tenure.effects`,
	} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	filters := map[string]any{"queue": "q1", "kind": "k1", "priority": int16(2), "created_from": time.Now().Add(-time.Hour),
		"created_to": time.Now().Add(time.Hour), "search": "x", "state": nil,
		"workflow_id": uuid.New(), "job_ids": []int64{42, 43}, "key": "account-7"}
	argsFor := func(order []string, over map[string]any) []any {
		var args []any
		for _, n := range order {
			if v, ok := over[n]; ok {
				args = append(args, v)
				continue
			}
			switch n {
			case "before_id":
				args = append(args, int64(math.MaxInt64))
			case "floor_id":
				args = append(args, int64(180000))
			case "max_rows":
				args = append(args, int32(50))
			case "since":
				args = append(args, time.Now().Add(-time.Hour))
			case "job_id", "id":
				args = append(args, int64(42))
			case "preview_max_stored", "preview_chars", "search_max_stored", "search_chars", "text_chars", "value_chars":
				args = append(args, int32(1000))
			default:
				args = append(args, filters[n])
			}
		}
		return args
	}
	for _, c := range []struct {
		name, index string
	}{
		{"UIJobIDBounds", "jobs_pkey"},
		{"UIListWindow", "jobs_pkey"},
		{"UIListReady", "jobs_ready_idx"},
		{"UIListRunning", "jobs_running_idx"},
		{"UIListDead", "jobs_dead_idx"},
		{"UIReadyBands", "jobs_ready_idx"},
		{"UICompletions", "jobs_finished_idx"},
		{"UIJobEffects", "effects_job_name"},
		{"UIJob", "jobs_pkey"},
		{"UIJobAudit", "audit_job_idx"},
		{"UIJobRaw", "jobs_pkey"},
		{"UIJobFlow", "jobs_pkey"},
		{"UIWorkflowTasks", "jobs_workflow_idx"},
		{"UIWorkflowStates", "jobs_workflow_idx"},
		{"UIWorkflowEdges", "job_deps_job_idx"},
		{"UISequenceJobs", "jobs_sequence_idx"},
		{"UISequenceStates", "jobs_sequence_idx"},
	} {
		sql, order := plantest.SQLIn(t, uiQueries, c.name)
		// Filters all set, then all unset: both generic plans must use the index.
		for _, over := range []map[string]any{{}, {"queue": nil, "kind": nil, "priority": nil, "created_from": nil, "created_to": nil, "search": nil}} {
			plan := plantest.Explain(t, pool, false, sql, argsFor(order, over)...)
			plantest.Walk(plan, func(n plantest.Node) {
				require.False(t, n.NodeType == "Seq Scan", "%s scans %s", c.name, n.Relation)
			})
			require.Contains(t, plantest.Indexes(plan), c.index, "%s", c.name)
		}
	}
	// The overview's "no live worker" list reads the ready jobs through jobs_ready_idx (the
	// worker registry and tenure.kinds are small tables: scanning them is fine).
	{
		sql, order := plantest.SQL(t, "UnservedJobs")
		plan := plantest.Explain(t, pool, false, sql, argsFor(order, nil)...)
		plantest.Walk(plan, func(n plantest.Node) {
			require.False(t, n.NodeType == "Seq Scan" && n.Relation == "jobs", "UnservedJobs scans jobs")
		})
		require.Contains(t, plantest.Indexes(plan), "jobs_ready_idx")
	}
	// The window list's cost is bounded by its window, not by the table: a filter matching
	// nothing in a window of 20,000 ids over 201,350 rows reads about the window's pages.
	sql, order := plantest.SQLIn(t, uiQueries, "UIListWindow")
	plan := plantest.Explain(t, pool, true, sql, argsFor(order, map[string]any{"queue": nil, "priority": nil,
		"created_from": nil, "created_to": nil, "search": nil, "kind": "nope"})...)
	var total int64
	plantest.Walk(plan, func(n plantest.Node) { total = max(total, n.Buffers()) })
	var tablePages int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'tenure.jobs'::regclass`).Scan(&tablePages))
	t.Logf("UIListWindow over a 20,000-id window: %d buffers; the table has %d pages", total, tablePages)
	require.Less(t, total, tablePages/5, "the window read a large part of the table")
}

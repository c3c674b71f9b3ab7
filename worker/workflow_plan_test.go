package worker_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
)

// TestWaitingJobsStayOffTheClaimPath: jobs waiting for dependencies (here 20,000 of them, as
// a 20,000-job sequence leaves them) never enter jobs_ready_idx, so the claim reads the same
// few index pages as with no waiting job at all; releasing one is a primary-key update that
// puts that row alone into the index.
func TestWaitingJobsStayOffTheClaimPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO tenure.jobs (kind, payload) SELECT 'noop', '{}' FROM generate_series(1, 10);
		INSERT INTO tenure.jobs (kind, payload, state, deps_pending, sequence_key)
			SELECT 'noop', '{}', 'waiting', 1, 'k' FROM generate_series(1, 20000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	indexTuples := func() int64 {
		var n float64
		require.NoError(t, pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'tenure.jobs_ready_idx'::regclass`).Scan(&n))
		return int64(n)
	}
	require.EqualValues(t, 10, indexTuples(), "only the ready jobs are in the claim's index")

	sql, names := plantest.SQL(t, "ClaimStrict")
	require.Equal(t, []string{"queue", "kind_versions", "kinds", "batch", "worker_id", "kind_lease_ms"}, names)
	args := []any{"default", []int32{1}, []string{"noop"}, 20, "w", []int32{0}}
	plan := plantest.ExplainEngine(t, pool, true, sql, args...)
	require.True(t, plantest.Indexes(plan)["jobs_ready_idx"], "the claim reads jobs_ready_idx")
	var readyIdxBuffers int64
	plantest.Walk(plan, func(n plantest.Node) {
		require.NotEqual(t, "Seq Scan", n.NodeType, "no sequential scan of %s", n.Relation)
		if n.IndexName == "jobs_ready_idx" {
			readyIdxBuffers += n.Buffers()
		}
	})
	require.Less(t, readyIdxBuffers, int64(20), "the claim's index scan does not walk the waiting jobs")

	// A release (what the trigger does) adds that one row to the index.
	_, err = pool.Exec(ctx, `UPDATE tenure.jobs SET state = 'ready', deps_pending = 0
		WHERE id = (SELECT min(id) FROM tenure.jobs WHERE state = 'waiting')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	require.EqualValues(t, 11, indexTuples())
}

// TestFanOutReleaseIsNotQuadratic: the release of a 1 -> N -> 1 fan-out (the root's finish
// releases N tasks in one statement of the trigger) reads its per-dependent rows once. With
// statistics on tenure.job_deps (a fan-out analyzed, as autovacuum leaves it), the cached
// generic plan of the trigger's UPDATE once joined the dependents found through
// = ANY(ARRAY(SELECT ... FROM per_job)) to a rescan of per_job for each of them: N x N row
// comparisons, 20,000 tasks past the 10 s finish deadline, so the root's finish was rolled back
// and retried for ever (bench/cmd/workflows -fanout 20000 -analyze-deps).
func TestFanOutReleaseIsNotQuadratic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	const n = 3000
	for _, q := range []string{
		`INSERT INTO tenure.jobs (id, kind, payload, has_dependents) OVERRIDING SYSTEM VALUE VALUES (1, 'noop', '{}', true)`,
		`INSERT INTO tenure.jobs (id, kind, payload, state, deps_pending, has_dependents) OVERRIDING SYSTEM VALUE
			SELECT i, 'noop', '{}', 'waiting', 1, true FROM generate_series(2, $1::int + 1) i`,
		`INSERT INTO tenure.jobs (id, kind, payload, state, deps_pending) OVERRIDING SYSTEM VALUE VALUES ($1::int + 2, 'noop', '{}', 'waiting', $1::int)`,
		`INSERT INTO tenure.job_deps (dep_id, job_id) SELECT 1, i FROM generate_series(2, $1::int + 1) i`,
		`INSERT INTO tenure.job_deps (dep_id, job_id) SELECT i, $1::int + 2 FROM generate_series(2, $1::int + 1) i`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, n)
		}
		_, err := pool.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `VACUUM ANALYZE tenure.jobs`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE tenure.job_deps`)
	require.NoError(t, err)

	// The root's final state, as an operator's cancel of a ready job writes it (the trigger
	// fires on any move to a final state); the explained statement is rolled back.
	_, nested := plantest.ExplainNested(t, pool, nil, `UPDATE tenure.jobs SET state = 'succeeded', finished_at = now() WHERE id = 1`)
	released := false
	for _, st := range nested {
		if !strings.Contains(st.Query, "per_job") {
			continue
		}
		released = true
		plantest.Walk(st.Plan, func(x plantest.Node) {
			if x.NodeType == "CTE Scan" && x.Loops > 1 {
				t.Fatalf("the release rescans a CTE %d times (a nested loop over the dependents)", x.Loops)
			}
		})
	}
	require.True(t, released, "auto_explain logged the trigger's release statement")
	var ready int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE state = 'ready' AND id > 1`).Scan(&ready))
	require.Zero(t, ready, "the explained finish was rolled back")
}

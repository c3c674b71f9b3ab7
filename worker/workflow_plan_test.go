package worker_test

import (
	"context"
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

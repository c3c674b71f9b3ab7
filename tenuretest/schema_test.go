package tenuretest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

// TestHelpersInAnotherSchema: PoolIn migrates only the given schema; Work (with the effect
// ledger and CompleteTx), Find and RequireEnqueued work in it when told the schema.
func TestHelpersInAnotherSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := tenuretest.PoolIn(t, "suite_b")
	var tenureSchemas int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'`).Scan(&tenureSchemas))
	require.Zero(t, tenureSchemas)

	res := tenuretest.Work(ctx, t, pool, func(ctx context.Context, job *generics.Job[Welcome]) error {
		if _, err := worker.Effect(ctx, job.JobRow, "mail", func(ctx context.Context, call worker.EffectCall) (string, error) {
			return "sent", nil
		}); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return worker.CompleteTx(ctx, tx, job.JobRow) })
	}, Welcome{UserID: 9}, &tenuretest.WorkOpts{Schema: "suite_b"})
	require.NoError(t, res.Outcome.Err)
	require.Equal(t, "succeeded", res.Outcome.Transition)
	var effects int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM suite_b.effects WHERE job_id = $1", res.Job.ID).Scan(&effects))
	require.Equal(t, 1, effects)

	c, err := jobs.NewClient(pool, &jobs.Config{Schema: "suite_b"})
	require.NoError(t, err)
	_, err = c.Insert(ctx, Welcome{UserID: 10}, nil)
	require.NoError(t, err)
	got := tenuretest.RequireEnqueued(ctx, t, pool, &tenuretest.Match[Welcome]{Schema: "suite_b", State: generics.JobStateReady})
	require.Len(t, got, 1)
	require.Equal(t, int64(10), got[0].Args.UserID)
	require.Len(t, tenuretest.Find(ctx, t, pool, &tenuretest.Match[Welcome]{Schema: "suite_b"}), 2)
}

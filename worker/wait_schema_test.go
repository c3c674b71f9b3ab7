package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestWaitAndProgressInAnotherSchema: in schema "alt" only, the finishes notify alt_done
// (the rewritten channel) and Wait hears them with no poll; progress rides on alt's heartbeat.
func TestWaitAndProgressInAnotherSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	runner, err := migrations.NewRunner(migrations.Options{Schema: "alt"})
	require.NoError(t, err)
	_, err = runner.Up(ctx, pool)
	require.NoError(t, err)

	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2}})
	cfg.Schema = "alt"
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[awaitArgs]) error {
		if err := worker.Progress(ctx, 2, 3, "alt"); err != nil {
			return err
		}
		if job.Args.Mode == "fail" {
			return worker.Permanent(context.Canceled)
		}
		return worker.SetOutput(ctx, report{Double: 2 * job.Args.N})
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), Schema: "alt", WaitPoll: time.Hour})
	require.NoError(t, err)
	startWorker(t, w)

	row, out, err := jobs.InsertAndWait[report](ctx, c, awaitArgs{N: 4}, nil)
	require.NoError(t, err)
	require.Equal(t, 8, out.Double)
	require.Equal(t, "alt", row.Progress.Msg)
	row, _, err = jobs.InsertAndWait[report](ctx, c, awaitArgs{Mode: "fail"}, nil)
	require.ErrorIs(t, err, jobs.ErrNotSucceeded)
	require.EqualValues(t, 2, row.Errors[0].Progress.Done)
	var listening int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN alt_done'`).Scan(&listening))
	require.Equal(t, 1, listening)
}

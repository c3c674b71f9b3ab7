package tenureprom_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/tenureprom"
	"github.com/tenureq/tenure/tenuretest"
	"github.com/tenureq/tenure/worker"
)

// TestClusterCollectorInAnotherSchema: in a database where Tenure lives in schema "prom_jobs"
// only (no schema "tenure"), a collector configured with that schema reports its jobs, its
// worker registry and its unserved jobs (read through the jobs.Client it builds there); one
// left at the default schema fails its scrape there; an invalid name is refused.
func TestClusterCollectorInAnotherSchema(t *testing.T) {
	t.Parallel()
	const schema = "prom_jobs"
	ctx := context.Background()
	pool := tenuretest.PoolIn(t, schema)
	w, err := worker.New(pool, &worker.Config{Schema: schema, ID: "prom-schema-w",
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 1}}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		FetchPollMax: 100 * time.Millisecond, RegistryEvery: 50 * time.Millisecond})
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[okArgs]) error { return nil }, nil)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	// Ready jobs of kind ok in queue mail, which the worker does not serve, and a dead one.
	_, err = pool.Exec(ctx, `
INSERT INTO prom_jobs.jobs (queue, kind, payload, priority, run_at)
SELECT 'mail', 'ok', '{}', 3, now() - interval '30 seconds' FROM generate_series(1, 2);
INSERT INTO prom_jobs.jobs (queue, kind, payload, priority, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
VALUES ('mail', 'ok', '{}', 3, 'dead', 1, 1, gen_random_uuid(), 1, now(), now(), 'TIMEOUT');`)
	require.NoError(t, err)

	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Schema: schema, MaxAge: -1, Wait: -1})
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	want := map[string]float64{
		"tenure_queue_jobs{kind=ok,priority=3,queue=mail,state=ready}":    2,
		"tenure_queue_jobs{kind=ok,priority=3,queue=mail,state=dead}":     1,
		"tenure_queue_dead_jobs_by_code{code=TIMEOUT,kind=ok,queue=mail}": 1,
		"tenure_ready_unserved_jobs{kind=ok,queue=mail}":                  2,
		"tenure_registered_workers{expired=false}":                        1,
		"tenure_registered_worker_expired{worker=prom-schema-w}":          0,
		"tenure_cluster_scrape_errors_total{}":                            0,
	}
	var series map[string]float64
	require.Eventually(t, func() bool { // the worker's registry row and kinds are written as it starts
		series = map[string]float64{}
		for k, m := range checkSeries(t, scrape(t, reg), clusterLabels) {
			series[k] = value(m)
		}
		_, ok := series["tenure_registered_worker_expired{worker=prom-schema-w}"]
		return ok
	}, 10*time.Second, 20*time.Millisecond)
	for k, v := range want {
		got, ok := series[k]
		require.True(t, ok, "series %s missing: %v", k, series)
		require.Equal(t, v, got, k)
	}
	require.InDelta(t, 30, series["tenure_queue_oldest_ready_age_seconds{kind=ok,priority=3,queue=mail}"], 10)

	// The default schema does not exist in this database: a collector reading it fails.
	def, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{MaxAge: -1, Wait: -1})
	require.NoError(t, err)
	dreg := prometheus.NewRegistry()
	require.NoError(t, dreg.Register(def))
	_, err = dreg.Gather()
	require.ErrorContains(t, err, "tenure.")

	for _, bad := range []string{"Prom", "9p", "public", "table", "information_schema"} {
		_, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Schema: bad})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, bad)
	}
}

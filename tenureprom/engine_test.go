package tenureprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/tenureprom"
)

var engineLabels = map[string]bool{"queue": true, "kind": true, "outcome": true, "attempt": true, "code": true, "priority": true}

func TestEngineCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w := startWorker(t, pool, "engine-test")
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry()})
	require.NoError(t, err)
	var params []jobs.InsertManyParams
	for i := range 20 {
		params = append(params, jobs.InsertManyParams{Args: okArgs{N: i}, Opts: &jobs.InsertOpts{Priority: 1 + i%3}})
	}
	params = append(params, jobs.InsertManyParams{Args: flakyArgs{FailFirst: 1}}, jobs.InsertManyParams{Args: flakyArgs{FailFirst: 5}})
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for st := w.Stats(); st.Succeeded < 21 || st.Dead < 1; st = w.Stats() {
		require.True(t, time.Now().Before(deadline), "jobs did not finish: %+v", st)
		time.Sleep(10 * time.Millisecond)
	}

	col := tenureprom.NewEngineCollector(w)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	problems, err := testutil.CollectAndLint(col)
	require.NoError(t, err)
	require.Empty(t, problems, "promlint")

	before := w.Stats()
	fams := scrape(t, reg)
	series := checkSeries(t, fams, engineLabels)
	for _, name := range []string{
		"tenure_claims_total", "tenure_claims_empty_total", "tenure_claim_duration_seconds", "tenure_stale_writes_total",
		"tenure_leases_lost_total", "tenure_leases_expired_total", "tenure_heartbeats_total", "tenure_job_wait_seconds",
		"tenure_jobs_running", "tenure_jobs_completed_total", "tenure_job_attempts_total", "tenure_job_errors_total",
		"tenure_finish_duration_seconds", "tenure_lease_extensions_total", "tenure_last_success_timestamp_seconds",
		"tenure_finished_on_claims_total", "tenure_awaited_finishes_total", "tenure_batches_total", "tenure_batch_jobs_total",
	} {
		require.Contains(t, fams, name)
	}
	require.Equal(t, dto.MetricType_HISTOGRAM, fams["tenure_claim_duration_seconds"].GetType())
	require.Equal(t, dto.MetricType_COUNTER, fams["tenure_jobs_completed_total"].GetType())

	get := func(key string) float64 {
		m, ok := series[key]
		require.True(t, ok, "series %s missing", key)
		return value(m)
	}
	require.EqualValues(t, 20, get("tenure_jobs_completed_total{kind=ok,outcome=succeeded,queue=default}"))
	require.EqualValues(t, 1, get("tenure_jobs_completed_total{kind=flaky,outcome=succeeded,queue=mail}"))
	require.EqualValues(t, 1, get("tenure_jobs_completed_total{kind=flaky,outcome=dead,queue=mail}"))
	require.EqualValues(t, 3, get("tenure_jobs_completed_total{kind=flaky,outcome=retried,queue=mail}"))
	require.EqualValues(t, 1, get("tenure_job_attempts_total{attempt=2,kind=flaky,outcome=succeeded,queue=mail}"))
	require.EqualValues(t, 1, get("tenure_job_attempts_total{attempt=3,kind=flaky,outcome=dead,queue=mail}"))
	require.EqualValues(t, 4, get("tenure_job_errors_total{code=HANDLER_ERROR}"))
	require.EqualValues(t, 0, get("tenure_stale_writes_total{}"))
	// The worker keeps polling: counters only grow between the two reads.
	require.GreaterOrEqual(t, get("tenure_claims_total{}"), float64(before.Claims))
	require.InDelta(t, get("tenure_claims_total{}"), get("tenure_claim_duration_seconds{}"), 2)
	require.GreaterOrEqual(t, get("tenure_claims_total{}"), get("tenure_claims_empty_total{}"))
	// Wait per queue and priority; the three okArgs priorities each have a histogram.
	for _, p := range []string{"1", "2", "3"} {
		require.Positive(t, get("tenure_job_wait_seconds{priority="+p+",queue=default}"))
	}
	h := series["tenure_claim_duration_seconds{}"].GetHistogram()
	require.NotEmpty(t, h.GetBucket())
	prev := uint64(0)
	for _, b := range h.GetBucket() {
		require.GreaterOrEqual(t, b.GetCumulativeCount(), prev)
		prev = b.GetCumulativeCount()
	}
	require.LessOrEqual(t, prev, h.GetSampleCount())
	require.Positive(t, h.GetSampleSum())
}

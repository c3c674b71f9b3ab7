package tenureprom_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/tenureprom"
)

var clusterLabels = map[string]bool{"queue": true, "kind": true, "priority": true, "state": true, "code": true, "worker": true, "expired": true, "outcome": true}

func TestClusterCollector(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at)
SELECT 'default', 'ok', '{}', 2, now() - interval '90 seconds' FROM generate_series(1, 3);
INSERT INTO tenure.jobs (queue, kind, payload, priority, run_at) VALUES
  ('default', 'ok', '{}', 2, now() - interval '10 seconds'),
  ('default', 'ok', '{}', 3, now() + interval '1 hour'),
  ('mail', 'flaky', '{}', 5, now() - interval '5 seconds');
INSERT INTO tenure.jobs (queue, kind, payload, priority, state, attempts, locked_by, locked_until, claim_token, attempted_at, generation, cancel_requested_at) VALUES
  ('mail', 'flaky', '{}', 5, 'running', 1, 'w1', now() + interval '30 seconds', gen_random_uuid(), now() - interval '120 seconds', 1, NULL),
  ('mail', 'flaky', '{}', 5, 'running', 1, 'w1', now() - interval '1 second', gen_random_uuid(), now(), 1, now());
INSERT INTO tenure.jobs (queue, kind, payload, priority, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
SELECT 'mail', 'flaky', '{}', p, 'dead', 3, 3, gen_random_uuid(), 3, now(), now(), c
FROM (VALUES (5, 'TIMEOUT'), (5, 'TIMEOUT'), (4, 'HANDLER_ERROR'), (5, NULL)) v(p, c);
INSERT INTO tenure.jobs (queue, kind, payload, state, attempts, claim_token, generation, attempted_at, finished_at)
SELECT 'default', 'ok', '{}', 'succeeded', 1, gen_random_uuid(), 1, now(), now() FROM generate_series(1, 50);
INSERT INTO tenure.workers (id, host, pid, version, queues, started_at, heartbeat_at, expires_at, last_success_at, counters) VALUES
  ('w1', 'h', 1, 'v', '{"default": {"concurrency": 1}}', now() - interval '1 hour', now() - interval '2 seconds', now() + interval '28 seconds', now() - interval '12 seconds', '{"succeeded": 40, "dead": 4}'),
  ('w-gone', 'h', 2, 'v', '{"mail": {"concurrency": 1}}', now() - interval '2 hours', now() - interval '1 hour', now() - interval '59 minutes', NULL, '{}');
-- w1 (live) serves default and registers ok; only the expired w-gone served mail and flaky.
INSERT INTO tenure.kinds (kind, worker_id, queue, priority, max_attempts, lease_ms, timeout_ms) VALUES
  ('ok', 'w1', 'default', 2, 25, 30000, 60000), ('flaky', 'w-gone', 'mail', 5, 3, 30000, 60000);`)
	require.NoError(t, err)

	col, err := tenureprom.NewClusterCollector(pool, nil)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(col))
	problems, err := testutil.CollectAndLint(col)
	require.NoError(t, err)
	require.Empty(t, problems, "promlint")

	series := checkSeries(t, scrape(t, reg), clusterLabels)
	want := map[string]float64{
		"tenure_queue_jobs{kind=ok,priority=2,queue=default,state=ready}":          4,
		"tenure_queue_jobs{kind=ok,priority=2,queue=default,state=scheduled}":      0,
		"tenure_queue_jobs{kind=ok,priority=3,queue=default,state=scheduled}":      1,
		"tenure_queue_jobs{kind=ok,priority=3,queue=default,state=ready}":          0,
		"tenure_queue_jobs{kind=flaky,priority=5,queue=mail,state=ready}":          1,
		"tenure_queue_jobs{kind=flaky,priority=5,queue=mail,state=running}":        2,
		"tenure_queue_jobs{kind=flaky,priority=5,queue=mail,state=dead}":           3,
		"tenure_queue_jobs{kind=flaky,priority=4,queue=mail,state=dead}":           1,
		"tenure_queue_lease_expired_jobs{kind=flaky,priority=5,queue=mail}":        1,
		"tenure_queue_cancel_requested_jobs{kind=flaky,priority=5,queue=mail}":     1,
		"tenure_queue_dead_jobs_by_code{code=TIMEOUT,kind=flaky,queue=mail}":       2,
		"tenure_queue_dead_jobs_by_code{code=HANDLER_ERROR,kind=flaky,queue=mail}": 1,
		"tenure_queue_dead_jobs_by_code{code=NONE,kind=flaky,queue=mail}":          1,
		"tenure_registered_workers{expired=false}":                                 1,
		"tenure_registered_workers{expired=true}":                                  1,
		"tenure_registered_worker_expired{worker=w-gone}":                          1,
		"tenure_registered_worker_expired{worker=w1}":                              0,
		"tenure_registered_worker_jobs_total{outcome=succeeded,worker=w1}":         40,
		"tenure_registered_worker_jobs_total{outcome=dead,worker=w1}":              4,
		"tenure_cluster_scrape_errors_total{}":                                     0,
		"tenure_ready_unserved_jobs{kind=flaky,queue=mail}":                        1,
	}
	require.NotContains(t, series, "tenure_ready_unserved_jobs{kind=ok,queue=default}", "a live worker serves it")
	for k, v := range want {
		m, ok := series[k]
		require.True(t, ok, "series %s missing", k)
		require.Equal(t, v, value(m), k)
	}
	approx := func(key string, v, delta float64) {
		m, ok := series[key]
		require.True(t, ok, "series %s missing", key)
		require.InDelta(t, v, value(m), delta, key)
	}
	approx("tenure_queue_oldest_ready_age_seconds{kind=ok,priority=2,queue=default}", 90, 5)
	approx("tenure_queue_oldest_ready_age_seconds{kind=ok,priority=3,queue=default}", 0, 0)
	approx("tenure_queue_oldest_ready_age_seconds{kind=flaky,priority=5,queue=mail}", 5, 5)
	approx("tenure_queue_oldest_running_age_seconds{kind=flaky,priority=5,queue=mail}", 120, 10)
	approx("tenure_registered_worker_heartbeat_age_seconds{worker=w1}", 2, 2)
	approx("tenure_registered_worker_heartbeat_age_seconds{worker=w-gone}", 3600, 10)
	approx("tenure_registered_worker_last_success_age_seconds{worker=w1}", 12, 2)
	require.NotContains(t, series, "tenure_registered_worker_last_success_age_seconds{worker=w-gone}")
	for k := range series {
		require.NotContains(t, k, "state=succeeded", "finished jobs are not counted")
	}
}

// TestClusterDeadCodesBounded: past MaxDeadCodeSeries, the smallest codes fold into OTHER.
func TestClusterDeadCodesBounded(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var values []string
	for i := range 10 {
		for range i + 1 {
			values = append(values, fmt.Sprintf("('CODE_%c')", 'A'+i))
		}
	}
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, state, attempts, max_attempts, claim_token, generation, attempted_at, finished_at, last_error_code)
SELECT 'k', '{}', 'dead', 1, 1, gen_random_uuid(), 1, now(), now(), c FROM (VALUES `+strings.Join(values, ",")+`) v(c)`)
	require.NoError(t, err)
	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{MaxDeadCodeSeries: 4})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	series := checkSeries(t, scrape(t, reg), clusterLabels)
	var codes []string
	var total float64
	for k, m := range series {
		if strings.HasPrefix(k, "tenure_queue_dead_jobs_by_code{") {
			codes = append(codes, k)
			total += value(m)
		}
	}
	require.Len(t, codes, 4)
	require.EqualValues(t, 55, total)
	require.Equal(t, 10.0, value(series["tenure_queue_dead_jobs_by_code{code=CODE_J,kind=k,queue=default}"]))
	require.Equal(t, 8.0, value(series["tenure_queue_dead_jobs_by_code{code=CODE_H,kind=k,queue=default}"]))
	require.Equal(t, 55.0-10-9-8, value(series["tenure_queue_dead_jobs_by_code{code=OTHER,kind=k,queue=default}"]))
}

// TestClusterScrapeFailsOnDatabaseError: a failed statement fails the scrape, counted.
func TestClusterScrapeFailsOnDatabaseError(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Timeout: time.Second})
	require.NoError(t, err)
	_, err = pool.Exec(context.Background(), `DROP TABLE tenure.workers`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	_, err = reg.Gather()
	require.Error(t, err)
	_, err = tenureprom.NewClusterCollector(nil, nil)
	require.ErrorIs(t, err, tenureprom.ErrNilPool)
}

// TestClusterSnapshot: a scrape serves the latest snapshot; one that finds the snapshot older
// than MaxAge starts a refresh and, when the refresh outlasts Wait (here: blocked by a lock on
// the registry table), serves the previous snapshot with its age instead of waiting; the
// refresh then lands for later scrapes. A snapshot younger than MaxAge is served without
// running any statement, and Wait < 0 makes every scrape wait for fresh numbers.
func TestClusterSnapshot(t *testing.T) {
	t.Parallel()
	rec := &sqlRecorder{}
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	ctx := context.Background()
	insertReady := func() {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('ok', '{}', now() - interval '1 second')`)
		require.NoError(t, err)
	}
	const readyKey = "tenure_queue_jobs{kind=ok,priority=2,queue=default,state=ready}"
	gather := func(reg *prometheus.Registry) map[string]*dto.Metric {
		return checkSeries(t, scrape(t, reg), clusterLabels)
	}
	newReg := func(cfg *tenureprom.ClusterConfig) *prometheus.Registry {
		col, err := tenureprom.NewClusterCollector(pool, cfg)
		require.NoError(t, err)
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(col))
		return reg
	}
	insertReady()

	// MaxAge < 0 and the default Wait: every scrape starts a refresh (unless one runs).
	reg := newReg(&tenureprom.ClusterConfig{MaxAge: -1, Timeout: time.Minute})
	s := gather(reg) // no snapshot yet: waits for the first refresh
	require.Equal(t, 1.0, value(s[readyKey]))
	insertReady()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `LOCK TABLE tenure.workers IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	for range 2 { // the second scrape finds the first one's refresh still blocked
		s = gather(reg)
		require.Equal(t, 1.0, value(s[readyKey]), "the previous snapshot is served while the refresh is blocked")
		require.Greater(t, value(s["tenure_cluster_snapshot_age_seconds{}"]), 0.0)
	}
	require.NoError(t, tx.Rollback(ctx))
	require.Eventually(t, func() bool { return value(gather(reg)[readyKey]) == 2 }, 30*time.Second, 10*time.Millisecond)

	// A snapshot younger than MaxAge is served as is: no statement runs.
	reg = newReg(&tenureprom.ClusterConfig{MaxAge: time.Hour, Wait: -1})
	require.Equal(t, 2.0, value(gather(reg)[readyKey]))
	before := len(rec.statements())
	insertReady()
	ran := len(rec.statements()) - before // the insert
	require.Equal(t, 2.0, value(gather(reg)[readyKey]))
	require.Equal(t, before+ran, len(rec.statements()), "a fresh enough snapshot runs no statement")

	// Wait < 0 and MaxAge < 0: every scrape waits for its own refresh (exact at each scrape).
	reg = newReg(&tenureprom.ClusterConfig{MaxAge: -1, Wait: -1})
	require.Equal(t, 3.0, value(gather(reg)[readyKey]))
	insertReady()
	require.Equal(t, 4.0, value(gather(reg)[readyKey]))
}

// TestClusterSnapshotAdaptiveMaxAge: by default a snapshot is reused for AdaptiveMaxAge times
// its refresh's duration: a slow refresh (here: held 300 ms by a lock) is not repeated by the
// next scrape, a cheap one is, once that short time has passed.
func TestClusterSnapshotAdaptiveMaxAge(t *testing.T) {
	t.Parallel()
	rec := &sqlRecorder{}
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = rec })
	ctx := context.Background()
	const readyKey = "tenure_queue_jobs{kind=ok,priority=2,queue=default,state=ready}"
	insertReady := func() {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('ok', '{}', now() - interval '1 second')`)
		require.NoError(t, err)
	}
	col, err := tenureprom.NewClusterCollector(pool, &tenureprom.ClusterConfig{Wait: -1})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(col))
	gather := func() map[string]*dto.Metric { return checkSeries(t, scrape(t, reg), clusterLabels) }
	insertReady()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	// The timer and the test's end both release the lock; once orders them (a pgx Tx is not
	// safe for concurrent use).
	var once sync.Once
	release := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	defer release()
	_, err = tx.Exec(ctx, `LOCK TABLE tenure.workers IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, release)
	s := gather()
	took := value(s["tenure_cluster_scrape_duration_seconds{}"])
	// The refresh waited for the lock: the 300 ms less the moments between the timer's start
	// and the scrape's (a refresh that does not wait takes a few milliseconds).
	require.GreaterOrEqual(t, took, 0.2)
	require.Equal(t, 1.0, value(s[readyKey]))
	insertReady()
	before := len(rec.statements())
	s = gather() // within 10 x 300 ms: the slow snapshot is served again
	require.Equal(t, before, len(rec.statements()), "no refresh within %d x the last refresh's duration", tenureprom.AdaptiveMaxAge)
	require.Equal(t, 1.0, value(s[readyKey]))

	// A cheap refresh is reused only for 10 x its few milliseconds.
	time.Sleep(time.Duration(tenureprom.AdaptiveMaxAge*took*float64(time.Second)) + 100*time.Millisecond)
	s = gather()
	require.Equal(t, 2.0, value(s[readyKey]))
	cheap := value(s["tenure_cluster_scrape_duration_seconds{}"])
	insertReady()
	time.Sleep(time.Duration(tenureprom.AdaptiveMaxAge*cheap*float64(time.Second)) + 50*time.Millisecond)
	require.Equal(t, 3.0, value(gather()[readyKey]))
}

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestPoolExhaustion (scenario 5): the application pool has 3 connections and 50 handlers each
// hold one of them (Acquire + 100 ms) with a 1 s lease, so most handlers wait in Acquire longer
// than their lease. The engine's own pool still claims, heartbeats and finishes: every job
// succeeds on its first attempt, no lease is lost, nothing is reclaimed or stale.
func TestPoolExhaustion(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	apool := openPool(t, pool.Config().ConnString(), 3, "")
	c := newClient(t, pool)
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 50}})
	w, err := worker.New(apool, cfg)
	require.NoError(t, err)
	var maxWait atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		t0 := time.Now()
		conn, err := apool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		if d := int64(time.Since(t0)); d > maxWait.Load() {
			maxWait.Store(d)
		}
		time.Sleep(100 * time.Millisecond)
		_, err = conn.Exec(ctx, "SELECT 1")
		return err
	}, &worker.HandlerOptions{Retry: fastRetry})
	const n = 200
	ids := insertN(t, c, n, func(i int) any { return faultArgs{N: i} }, &jobs.InsertOpts{Lease: time.Second})
	t0 := time.Now()
	startWorker(t, w)
	waitFor(t, 45*time.Second, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	drain := time.Since(t0)
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	var retried int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE attempts > 1").Scan(&retried))
	st := w.Stats()
	result(t, "pool-exhaustion", tl, "n/a", "drain="+ms(drain), "max_acquire_wait="+ms(time.Duration(maxWait.Load())),
		"heartbeat_rows="+strconv.FormatInt(st.HeartbeatRows, 10), "leases_lost="+strconv.FormatInt(st.LeasesLost, 10),
		"reattempted="+strconv.Itoa(retried))
	require.Greater(t, time.Duration(maxWait.Load()), time.Second, "handlers waited longer than their lease for a connection")
	require.Positive(t, st.HeartbeatRows, "leases were extended while handlers waited")
	require.Zero(t, st.LeasesLost)
	require.Zero(t, st.StaleRejected)
	require.Zero(t, st.Reclaimed)
	require.Zero(t, retried, "every job succeeded on its first attempt")
}

// TestRetryStorm (scenario 6): 2,000 jobs fail three times each, then succeed, with full-jitter
// backoff (base 10 ms, cap 1 s: bounds 20, 40, 80 ms). A trigger on the test database logs,
// for every retry the database wrote, run_at - failure time (both from the same statement's
// now()). Asserted: every job succeeded with exactly 4 attempts; the 6,000 delays divided by
// their bound are uniform on [0, 1): chi-square over 10 buckets below 40 (df 9; p ~ 1e-5)
// and Kolmogorov-Smirnov D below 2.5/sqrt(n). Drain time is reported.
func TestRetryStorm(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	_, err := pool.Exec(ctx, `
CREATE TABLE public.retry_log (id bigint, attempts int, delay_us double precision);
CREATE FUNCTION public.log_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'ready' AND OLD.state = 'running' AND NEW.attempts > 0 THEN
    INSERT INTO public.retry_log VALUES (NEW.id, NEW.attempts,
      extract(epoch FROM NEW.run_at - (NEW.errors->-1->>'at')::timestamptz) * 1e6);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER log_retry AFTER UPDATE ON tenure.jobs FOR EACH ROW EXECUTE FUNCTION public.log_retry();`)
	require.NoError(t, err)
	c := newClient(t, pool)
	policy := worker.FullJitter{Base: 10 * time.Millisecond, Cap: time.Second}
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 50}})
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		if job.Attempt <= 3 {
			return errors.New("transient failure")
		}
		return nil
	}, &worker.HandlerOptions{Retry: policy})
	const n = 2000
	ids := insertN(t, c, n, func(i int) any { return faultArgs{N: i} }, &jobs.InsertOpts{Lease: 10 * time.Second, MaxAttempts: 10})
	t0 := time.Now()
	startWorker(t, w)
	waitFor(t, 60*time.Second, "every job to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	drain := time.Since(t0)
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	var notFour int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE attempts <> 4").Scan(&notFour))

	rows, err := pool.Query(ctx, "SELECT attempts, delay_us FROM public.retry_log")
	require.NoError(t, err)
	var xs []float64
	var a int
	var us float64
	outOfRange := 0
	_, err = pgx.ForEachRow(rows, []any{&a, &us}, func() error {
		x := us / float64(policy.Bound(a).Microseconds())
		if x < 0 || x >= 1.0001 {
			outOfRange++
		}
		xs = append(xs, min(max(x, 0), 0.999999))
		return nil
	})
	require.NoError(t, err)
	chi2, ksD := uniformity(xs, 10)
	ksLimit := 2.5 / math.Sqrt(float64(len(xs)))
	result(t, "retry-storm", tl, "n/a", "drain="+ms(drain), "retries_logged="+strconv.Itoa(len(xs)),
		fmt.Sprintf("chi2=%.1f", chi2), fmt.Sprintf("ks_d=%.4f", ksD), fmt.Sprintf("ks_limit=%.4f", ksLimit))
	require.Zero(t, notFour, "every job ran exactly 4 attempts")
	require.Equal(t, 3*n, len(xs), "one logged retry per failure")
	require.Zero(t, outOfRange, "delays outside [0, bound)")
	require.Less(t, chi2, 40.0, "backoff delays not uniform over [0, bound) (chi-square, 10 buckets)")
	require.Less(t, ksD, ksLimit, "backoff delays not uniform over [0, bound) (Kolmogorov-Smirnov)")
}

// uniformity returns the chi-square statistic of xs (in [0,1)) over k equal buckets and the
// Kolmogorov-Smirnov distance to the uniform distribution.
func uniformity(xs []float64, k int) (chi2, d float64) {
	if len(xs) == 0 {
		return math.Inf(1), 1
	}
	counts := make([]int, k)
	for _, x := range xs {
		counts[min(int(x*float64(k)), k-1)]++
	}
	exp := float64(len(xs)) / float64(k)
	for _, c := range counts {
		chi2 += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := float64(len(s))
	for i, x := range s {
		d = max(d, math.Abs(float64(i+1)/n-x), math.Abs(x-float64(i)/n))
	}
	return chi2, d
}

// TestRowLockHeld (scenario 7): an operator's transaction holds FOR UPDATE row locks on the 5
// oldest ready jobs for 10 s. Every other job (495) must finish while the locks are held
// (SKIP LOCKED passes over them; watermarks must not strand them), the 5 locked ones stay ready
// and run within seconds of the release.
func TestRowLockHeld(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool)
	const n, locked, hold = 500, 5, 10 * time.Second
	ids := insertN(t, c, n, func(i int) any { return faultArgs{N: i} }, &jobs.InsertOpts{Lease: 5 * time.Second})
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, `SELECT id FROM tenure.jobs WHERE state = 'ready'
		ORDER BY priority DESC, run_at, id LIMIT $1 FOR UPDATE`, locked)
	require.NoError(t, err)
	lockedIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, lockedIDs, locked)
	lockedAt := time.Now()

	w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 10}}))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[faultArgs]) error {
		time.Sleep(5 * time.Millisecond)
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	startWorker(t, w)
	waitFor(t, hold, "every unlocked job to succeed while the locks are held", func() bool {
		return countStates(ctx, pool)["succeeded"] == n-locked
	})
	othersDone := time.Since(lockedAt)
	var stillReady int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND state = 'ready'", lockedIDs).Scan(&stillReady))
	require.Equal(t, locked, stillReady, "the locked jobs are untouched while locked")
	time.Sleep(time.Until(lockedAt.Add(hold))) // keep holding for the scenario's duration
	require.NoError(t, tx.Rollback(ctx))
	released := time.Now()
	waitFor(t, 15*time.Second, "the released jobs to succeed", func() bool { return countStates(ctx, pool)["succeeded"] == n })
	recovery := time.Since(released)
	tl := audit(t, pool, ids, generics.JobStateSucceeded, time.Second)
	result(t, "row-lock-held", tl, ms(recovery), "locked="+strconv.Itoa(locked), "hold="+ms(hold), "others_done_after="+ms(othersDone))
	require.Less(t, recovery, 3*time.Second, "released jobs run within 3 s (watermark reset is 1 s)")
}

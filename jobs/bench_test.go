package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// BenchmarkInsertMany10k reports bulk enqueue throughput for 10,000-job calls.
func BenchmarkInsertMany10k(b *testing.B) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	params := make([]jobs.InsertManyParams, 10000)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: "0123456789abcdef0123456789abcdef"}}
	}
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		_, err := c.InsertMany(ctx, params)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*len(params))/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkInsertOne reports single-job enqueue latency (its own transaction, one round trip).
func BenchmarkInsertOne(b *testing.B) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	ctx := context.Background()
	var h hist.H
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		_, err := c.Insert(ctx, blobArgs{Data: "0123456789abcdef"}, nil)
		require.NoError(b, err)
		h.Record(time.Since(t0))
	}
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds()), "p99-µs")
}

// BenchmarkInsertOneUnique is BenchmarkInsertOne with a unique job of a new key each time
// (the insert path), and BenchmarkInsertOneDuplicate with the same key each time (the
// duplicate path: the holder is returned).
func BenchmarkInsertOneUnique(b *testing.B)    { benchInsertUnique(b, false) }
func BenchmarkInsertOneDuplicate(b *testing.B) { benchInsertUnique(b, true) }

func benchInsertUnique(b *testing.B, same bool) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	ctx := context.Background()
	o := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}
	var h hist.H
	b.ResetTimer()
	for i := range b.N {
		id := int64(i)
		if same {
			id = 0
		}
		t0 := time.Now()
		r, err := c.Insert(ctx, receiptArgs{OrderID: id, Email: "0123456789abcdef"}, o)
		require.NoError(b, err)
		require.Equal(b, same && i > 0, r.Duplicate)
		h.Record(time.Since(t0))
	}
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds()), "p50-µs")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds()), "p99-µs")
}

// BenchmarkInsertMany10kUnique is BenchmarkInsertMany10k with unique jobs (distinct keys).
func BenchmarkInsertMany10kUnique(b *testing.B) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for n := range b.N {
		params := make([]jobs.InsertManyParams, 10000)
		for i := range params {
			params[i] = jobs.InsertManyParams{Args: receiptArgs{OrderID: int64(n*len(params) + i), Email: "0123456789abcdef"},
				Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}}
		}
		_, err := c.InsertMany(ctx, params)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*10000)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkBulkEnqueueVsCeiling: 100,000 jobs in calls of 1,000 through InsertMany and
// InsertManyFast, against the server's own ceiling for the same rows (a server-side
// INSERT ... SELECT generate_series into the same table and indexes, same batch size), in one
// run, alternated, the table truncated before each pass. Reports each as jobs/s and the two
// APIs as % of the ceiling measured in the same round.
func BenchmarkBulkEnqueueVsCeiling(b *testing.B) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	ctx := context.Background()
	const total, batch = 100000, 1000
	pad := "0123456789abcdef0123456789abcdef"
	params := make([]jobs.InsertManyParams, batch)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: pad}}
	}
	pass := func(insert func(start int) error) float64 {
		_, err := pool.Exec(ctx, "TRUNCATE tenure.jobs")
		require.NoError(b, err)
		t0 := time.Now()
		for start := 0; start < total; start += batch {
			require.NoError(b, insert(start))
		}
		return total / time.Since(t0).Seconds()
	}
	ceiling := func(start int) error {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags)
			SELECT 'default', 'blob', jsonb_build_object('data', $1::text), 1, 2, now(), 25, 30000, '{}'::jsonb, '{}'::text[]
			FROM generate_series($2::bigint, $3::bigint)`, pad, start, start+batch-1)
		return err
	}
	many := func(int) error { _, err := c.InsertMany(ctx, params); return err }
	fast := func(int) error { _, err := c.InsertManyFast(ctx, params); return err }
	var sumC, sumM, sumF float64
	for range b.N {
		rc, rm, rf := pass(ceiling), pass(many), pass(fast)
		sumC, sumM, sumF = sumC+rc, sumM+rm, sumF+rf
		b.Logf("ceiling %.0f, InsertMany %.0f (%.0f%%), InsertManyFast %.0f (%.0f%%) jobs/s", rc, rm, 100*rm/rc, rf, 100*rf/rc)
	}
	n := float64(b.N)
	b.ReportMetric(sumC/n, "ceiling-jobs/s")
	b.ReportMetric(sumM/n, "insertmany-jobs/s")
	b.ReportMetric(sumF/n, "insertmanyfast-jobs/s")
	b.ReportMetric(100*sumM/sumC, "insertmany-%")
	b.ReportMetric(100*sumF/sumC, "insertmanyfast-%")
}

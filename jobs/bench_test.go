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

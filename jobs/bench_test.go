package jobs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
//
// Two payload sizes (pad of 32 bytes, and 240 bytes as in bench/cmd/compare's bulk-enqueue)
// and two passes that locate the gap between an API and the ceiling:
//   - parsed-ceiling: the same server-side INSERT ... SELECT, but the payload is built as JSON
//     text and cast to jsonb, so the server parses it as it must for any client-sent payload
//     (the ceiling proper builds it with jsonb_build_object and never parses JSON);
//   - raw-copy: pgx's CopyFrom (COPY's binary format) of the same columns InsertManyFast
//     writes, rows built before the clock starts, in a transaction;
//   - raw-csv: the same rows as COPY CSV, prebuilt, in a transaction — what InsertManyFast
//     sends, without the client library's per-job work (args encoding, validation, the band
//     signal). raw-copy against raw-csv is the server's binary COPY path against its CSV path.
//
// go test -run '^$' -bench BulkEnqueueVsCeiling -benchtime 3x ./jobs/
func BenchmarkBulkEnqueueVsCeiling(b *testing.B) {
	for _, size := range []int{32, 240} {
		b.Run(fmt.Sprintf("pad=%d", size), func(b *testing.B) { benchBulkVsCeiling(b, strings.Repeat("x", size)) })
	}
}

func benchBulkVsCeiling(b *testing.B, pad string) {
	pool := pgtest.NewPool(b)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	ctx := context.Background()
	const total, batch = 100000, 1000
	params := make([]jobs.InsertManyParams, batch)
	payload, err := json.Marshal(blobArgs{Data: pad})
	require.NoError(b, err)
	rawRows := make([][]any, batch)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: blobArgs{Data: pad}}
		rawRows[i] = []any{"default", blobArgs{}.Kind(), payload, int32(1), int16(2), int32(25), int32(30000)}
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
	parsed := func(start int) error {
		_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (queue, kind, payload, payload_version, priority, run_at, max_attempts, lease_ms, metadata, tags)
			SELECT 'default', 'blob', ('{"data":"' || $1::text || '","n":' || g || '}')::jsonb, 1, 2, now(), 25, 30000, '{}'::jsonb, '{}'::text[]
			FROM generate_series($2::bigint, $3::bigint) AS g`, pad, start, start+batch-1)
		return err
	}
	rawCopy := func(int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"tenure", "jobs"},
				[]string{"queue", "kind", "payload", "payload_version", "priority", "max_attempts", "lease_ms"}, pgx.CopyFromRows(rawRows))
			return err
		})
	}
	var csv bytes.Buffer
	for range batch {
		csv.WriteString(`"default","blob","` + strings.ReplaceAll(string(payload), `"`, `""`) + `",1,2,25,30000` + "\n")
	}
	rawCSV := func(int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(csv.Bytes()),
				"COPY tenure.jobs (queue, kind, payload, payload_version, priority, max_attempts, lease_ms) FROM STDIN (FORMAT csv)")
			return err
		})
	}
	many := func(int) error { _, err := c.InsertMany(ctx, params); return err }
	fast := func(int) error { _, err := c.InsertManyFast(ctx, params); return err }
	passes := []struct {
		name string
		f    func(int) error
	}{{"ceiling", ceiling}, {"parsed-ceiling", parsed}, {"raw-copy", rawCopy}, {"raw-csv", rawCSV}, {"insertmany", many}, {"insertmanyfast", fast}}
	sums := make([]float64, len(passes))
	for range b.N {
		var line []string
		var rc float64
		for i, p := range passes {
			r := pass(p.f)
			if i == 0 {
				rc = r
			}
			sums[i] += r
			line = append(line, fmt.Sprintf("%s %.0f (%.0f%%)", p.name, r, 100*r/rc))
		}
		b.Logf("jobs/s (%% of ceiling): %s", strings.Join(line, ", "))
	}
	for i, p := range passes {
		b.ReportMetric(sums[i]/float64(b.N), p.name+"-jobs/s")
		if i > 0 {
			b.ReportMetric(100*sums[i]/sums[0], p.name+"-%")
		}
	}
}

// BenchmarkPruneExpired measures PruneExpired's rate (jobs/s) on 100,000 expired final jobs
// (a tenth dead, a tenth with an effect each) beside 5,000 recent ones it must keep: the pace
// TestPruneExpiredKeepsUpWithAMillionRows no longer asserts.
func BenchmarkPruneExpired(b *testing.B) {
	pool := pgtest.NewPool(b)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(b, err)
	const n = 100_000
	var pruned int64
	var took time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		insertFinished(b, pool, "old", n, 48*time.Hour)
		insertFinished(b, pool, "recent", 5000, 10*time.Minute)
		addEffects(b, pool, "old")
		_, err = pool.Exec(ctx, "ANALYZE tenure.jobs; ANALYZE tenure.effects")
		require.NoError(b, err)
		hour := time.Now().Add(-time.Hour)
		b.StartTimer()
		start := time.Now()
		res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: hour, DeadBefore: hour, Budget: 10 * time.Minute})
		took += time.Since(start)
		require.NoError(b, err)
		require.True(b, res.Drained, "%+v", res)
		pruned += res.Finished + res.Dead
		b.StopTimer()
		_, err = pool.Exec(ctx, "DELETE FROM tenure.effects; DELETE FROM tenure.jobs")
		require.NoError(b, err)
		b.StartTimer()
	}
	b.ReportMetric(float64(pruned)/took.Seconds(), "jobs/s")
}

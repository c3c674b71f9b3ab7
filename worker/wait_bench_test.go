package worker_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/hist"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// BenchmarkWaitLatency: an idle queue, one job at a time, a waiter (jobs.Client.Wait) on it
// from before its insert; handler return -> Wait's return (the finish, its NOTIFY on the done
// channel, the waiter registry's re-read), woken by NOTIFY (the poll is an hour). Compare with
// BenchmarkPickupLatency (enqueue commit -> handler start) in the same run.
//
// Sub-benchmarks: linger20ms is the default Config.FinishLinger (a lone finish waits up to
// 20 ms for company: part of what a waiter sees), linger0 turns it off. settled-ms is measured
// from the OnOutcome report (after the finish committed) instead of the handler's return.
func BenchmarkWaitLatency(b *testing.B) {
	b.Run("linger20ms", func(b *testing.B) { benchWaitLatency(b, 0) })
	b.Run("linger0", func(b *testing.B) { benchWaitLatency(b, -1) })
}

func benchWaitLatency(b *testing.B, linger time.Duration) {
	pool := benchPool(b)
	settled := make(chan time.Time, 1)
	w, err := worker.New(pool, &worker.Config{Logger: testLogger(), AsynchronousCommit: os.Getenv("TENURE_BENCH_ASYNC") == "1",
		Queues: map[string]worker.QueueConfig{"default": {Concurrency: 32}}, FinishLinger: linger,
		OnOutcome: func(worker.Outcome) {
			select {
			case settled <- time.Now():
			default:
			}
		}})
	require.NoError(b, err)
	returned := make(chan time.Time, 1)
	worker.MustRegister(w, func(context.Context, *generics.Job[noopArgs]) error {
		returned <- time.Now()
		return nil
	}, nil)
	c, err := jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), WaitPoll: time.Hour})
	require.NoError(b, err)
	require.NoError(b, w.Start(context.Background()))
	defer func() { _ = stopWorker(b, w, 5*time.Second) }()
	time.Sleep(300 * time.Millisecond) // listener up, claim loop idle
	// Warm the waiter registry (its LISTEN connection) with one job.
	_, _, err = jobs.InsertAndWait[struct{}](context.Background(), c, noopArgs{}, nil)
	require.NoError(b, err)
	<-returned
	<-settled
	var h, hs hist.H
	b.ResetTimer()
	for i := range b.N {
		res, err := c.Insert(context.Background(), noopArgs{N: i}, nil)
		require.NoError(b, err)
		row, err := c.Wait(context.Background(), res.Job.ID)
		waited := time.Now()
		require.NoError(b, err)
		require.Equal(b, generics.JobStateSucceeded, row.State)
		h.Record(waited.Sub(<-returned))
		hs.Record(max(waited.Sub(<-settled), 0))
		time.Sleep(5 * time.Millisecond) // idle between jobs
	}
	b.StopTimer()
	b.ReportMetric(float64(h.Quantile(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(h.Quantile(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(hs.Quantile(0.5).Microseconds())/1000, "settled-p50-ms")
	b.ReportMetric(float64(hs.Quantile(0.99).Microseconds())/1000, "settled-p99-ms")
}

// BenchmarkFinishNotify: the cost of the done channel's NOTIFY in the finish statement.
// CompleteMany of batches of 1, 16 and 100 running jobs, as db/queries.sql has it ("notify")
// and with its notified CTE taken out ("plain"), alternating in one database so that both
// see the same load; the finished rows are deleted (untimed) so that the table stays small.
// Reports the statement's mean time per batch (commit included: each
// statement is its own transaction, and NOTIFY's cost is at commit).
func BenchmarkFinishNotify(b *testing.B) {
	withNotify, _ := plantest.SQL(b, "CompleteMany")
	i := strings.Index(withNotify, "), notified AS (")
	j := strings.Index(withNotify, "SELECT d.id, false AS busy FROM done d CROSS JOIN notified")
	require.True(b, i > 0 && j > i, "the statement's notify CTE")
	plain := withNotify[:i] + ")\n" + strings.Replace(withNotify[j:], " CROSS JOIN notified", "", 1)
	pool := benchPool(b)
	ctx := context.Background()
	for _, batch := range []int{1, 16, 100} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			var took [2]time.Duration
			var runs [2]int
			for n := range b.N {
				for v, sql := range []string{withNotify, plain} {
					b.StopTimer()
					rows, err := pool.Query(ctx, `WITH ins AS (INSERT INTO tenure.jobs (kind, payload, state, attempts, claim_token, generation, attempted_at, locked_by, locked_until)
						SELECT 'noop', '{}', 'running', 1, gen_random_uuid(), 1, now(), 'w', now() + interval '1 minute' FROM generate_series(1, $1)
						RETURNING id, claim_token) SELECT id, claim_token FROM ins ORDER BY id`, batch)
					require.NoError(b, err)
					var ids []int64
					var tokens []uuid.UUID
					for rows.Next() {
						var id int64
						var tok uuid.UUID
						require.NoError(b, rows.Scan(&id, &tok))
						ids, tokens = append(ids, id), append(tokens, tok)
					}
					require.NoError(b, rows.Err())
					outputs := make([][]byte, batch)
					for k := range outputs {
						outputs[k] = []byte("null")
					}
					b.StartTimer()
					start := time.Now()
					tag, err := pool.Exec(ctx, sql, ids, tokens, outputs, nil)
					took[v] += time.Since(start)
					runs[v]++
					require.NoError(b, err)
					require.EqualValues(b, batch, tag.RowsAffected(), "run %d", n)
					b.StopTimer()
					_, err = pool.Exec(ctx, "DELETE FROM tenure.jobs WHERE id = ANY($1)", ids) // keep the table small
					require.NoError(b, err)
					b.StartTimer()
				}
			}
			b.ReportMetric(float64(took[0].Microseconds())/float64(runs[0]), "notify-us/batch")
			b.ReportMetric(float64(took[1].Microseconds())/float64(runs[1]), "plain-us/batch")
		})
	}
}

package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
)

// insertFinished inserts n final jobs (every 10th dead, every 10th+1 cancelled, the rest
// succeeded) finished between finishedAgo and finishedAgo-n ms, in one statement.
func insertFinished(t testing.TB, pool *pgxpool.Pool, kind string, n int, finishedAgo time.Duration) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO tenure.jobs (kind, payload, state, attempts, attempted_at, finished_at, generation)
		SELECT $1, '{}',
		       (CASE g % 10 WHEN 0 THEN 'dead' WHEN 1 THEN 'cancelled' ELSE 'succeeded' END)::tenure.job_state,
		       1, now() - $3::bigint * interval '1 microsecond',
		       now() - $3::bigint * interval '1 microsecond' + g * interval '1 millisecond', 1
		FROM generate_series(1, $2::int) g`, kind, n, finishedAgo.Microseconds())
	require.NoError(t, err)
}

// addEffects records one effect for every job of kind whose id % 10 = 3.
func addEffects(t testing.TB, pool *pgxpool.Pool, kind string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO tenure.effects (key, job_id, name, generation, result)
		SELECT 'job:' || id || ':effect:x', id, 'x', 1, '{}' FROM tenure.jobs WHERE kind = $1 AND id % 10 = 3`, kind)
	require.NoError(t, err)
}

func countWhere(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestPruneExpiredKeepsUpWithAMillionRows: a million expired final jobs (and the effects of a
// tenth of them) are gone in one call, in short batches, while recent final jobs, live jobs
// and their effects stay. The budget is a liveness bound for a loaded machine, not a pace:
// how fast it goes is BenchmarkPruneExpired's (the test logs its rate).
func TestPruneExpiredKeepsUpWithAMillionRows(t *testing.T) {
	if testing.Short() {
		t.Skip("inserts and prunes a million rows")
	}
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	const old = 1_000_000
	t0 := time.Now()
	insertFinished(t, pool, "old", old, 48*time.Hour)
	insertFinished(t, pool, "recent", 5000, 10*time.Minute)
	live := make([]jobs.InsertManyParams, 1000)
	for i := range live {
		live[i] = jobs.InsertManyParams{Args: blobArgs{Data: "live"}}
	}
	_, err = c.InsertMany(ctx, live)
	require.NoError(t, err)
	for _, k := range []string{"old", "recent", "blob"} {
		addEffects(t, pool, k)
	}
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs; ANALYZE tenure.effects")
	require.NoError(t, err)
	oldEffects := countWhere(t, pool, "SELECT count(*) FROM tenure.effects e JOIN tenure.jobs j ON j.id = e.job_id WHERE j.kind = 'old'")
	keptEffects := countWhere(t, pool, "SELECT count(*) FROM tenure.effects") - oldEffects
	require.EqualValues(t, old/10, oldEffects)
	t.Logf("setup: %d rows in %v", old+6000, time.Since(t0).Round(time.Millisecond))

	hour := time.Now().Add(-time.Hour)
	start := time.Now()
	res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: hour, DeadBefore: hour, Budget: 10 * time.Minute})
	elapsed := time.Since(start)
	require.NoError(t, err)
	t.Logf("pruned %d finished + %d dead jobs and %d effects in %d batches, %v: %.0f jobs/s",
		res.Finished, res.Dead, res.Effects, res.Batches, elapsed.Round(time.Millisecond), float64(res.Finished+res.Dead)/elapsed.Seconds())
	require.True(t, res.Drained, "%+v", res)
	require.False(t, res.Skipped)
	require.EqualValues(t, old*9/10, res.Finished)
	require.EqualValues(t, old/10, res.Dead)
	require.EqualValues(t, oldEffects, res.Effects)

	require.Zero(t, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE kind = 'old'"))
	require.EqualValues(t, 5000, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE kind = 'recent'"))
	require.EqualValues(t, 1000, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE kind = 'blob' AND state = 'ready'"))
	require.Zero(t, countWhere(t, pool, "SELECT count(*) FROM tenure.effects e WHERE NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.id = e.job_id)"),
		"no effect outlives its job")
	require.Equal(t, keptEffects, countWhere(t, pool, "SELECT count(*) FROM tenure.effects"), "effects of kept jobs stay")

	// nothing left: one short batch per class
	res, err = c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: hour, DeadBefore: hour})
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Batches: 2, Drained: true}, res)
}

// TestPruneExpiredBatchesBudgetAndClasses checks the batch loop on a small table: classes and
// their cut-offs, the effects of exactly the pruned jobs, the budget stopping the loop, and
// a zero time skipping its class.
func TestPruneExpiredBatchesBudgetAndClasses(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	insertFinished(t, pool, "old", 1000, 48*time.Hour) // 100 dead, 100 cancelled, 800 succeeded
	addEffects(t, pool, "old")
	// an effect whose job id is not a pruned job's stays: pruning deletes exactly its jobs' effects
	_, err = pool.Exec(ctx, `INSERT INTO tenure.effects (key, job_id, name, generation, result) VALUES ('job:999999999:effect:x', 999999999, 'x', 1, '{}')`)
	require.NoError(t, err)

	// a budget already spent: one batch of each class, then stop
	res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now(), DeadBefore: time.Now(), BatchSize: 30, Budget: time.Nanosecond})
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Finished: 30, Dead: 30, Effects: res.Effects, Batches: 2}, res)
	require.EqualValues(t, 940, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs"))

	// dead only
	res, err = c.PruneExpired(ctx, jobs.PruneParams{DeadBefore: time.Now(), BatchSize: 30})
	require.NoError(t, err)
	require.EqualValues(t, 70, res.Dead)
	require.Zero(t, res.Finished)
	require.True(t, res.Drained)
	require.Equal(t, 3, res.Batches, "30 + 30 + 10")

	// finished, cut off in the middle of the range: the oldest first, the rest kept (the cut is
	// read from the rows: a wall-clock offset from the insert broke when the steps above took
	// longer than the range's 1 s spread on a loaded machine)
	var cut time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT finished_at FROM tenure.jobs WHERE state IN ('succeeded', 'cancelled')
		ORDER BY finished_at OFFSET 400 LIMIT 1`).Scan(&cut))
	res, err = c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: cut, BatchSize: 30})
	require.NoError(t, err)
	require.True(t, res.Drained)
	require.EqualValues(t, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE finished_at < $1", cut), 0)
	require.Positive(t, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE state IN ('succeeded', 'cancelled')"))
	require.Zero(t, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs WHERE state = 'dead'"))

	require.EqualValues(t, 1, countWhere(t, pool, "SELECT count(*) FROM tenure.effects e WHERE NOT EXISTS (SELECT 1 FROM tenure.jobs j WHERE j.id = e.job_id)"),
		"only the unrelated effect has no job")

	_, err = c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now(), BatchSize: 100001})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
	res, err = c.PruneExpired(ctx, jobs.PruneParams{})
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Drained: true}, res, "no class asked: nothing to do")
}

// TestPruneExpiredElectsOnePruner checks the election: a session holding locks.Prune makes
// PruneExpired skip, the migration runner's lock does not (they used to share a key), and the
// lock is released when the call returns.
func TestPruneExpiredElectsOnePruner(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	insertFinished(t, pool, "old", 100, 48*time.Hour)
	other, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer other.Release()

	_, err = other.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockKey)
	require.NoError(t, err)
	res, err := c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now(), BatchSize: 50})
	require.NoError(t, err)
	require.False(t, res.Skipped, "a migration run must not stop pruning")
	require.EqualValues(t, 90, res.Finished)
	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock($1)", migrations.LockKey)
	require.NoError(t, err)

	_, err = other.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(locks.Prune))
	require.NoError(t, err)
	res, err = c.PruneExpired(ctx, jobs.PruneParams{DeadBefore: time.Now()})
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Skipped: true}, res)
	require.EqualValues(t, 10, countWhere(t, pool, "SELECT count(*) FROM tenure.jobs"))
	_, err = other.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(locks.Prune))
	require.NoError(t, err)

	res, err = c.PruneExpired(ctx, jobs.PruneParams{DeadBefore: time.Now()})
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Dead)
	var free bool
	require.NoError(t, other.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(locks.Prune)).Scan(&free))
	require.True(t, free, "PruneExpired released its lock")
}

// TestPruneBatchPlansUseTheFinishedIndex runs EXPLAIN (generic plans, as the engine's pool
// uses) on sqlc's text of each prune batch statement: the candidates come from
// jobs_finished_idx, the deletes reach rows by primary key and effects by their job_id index,
// and nothing scans a whole table.
func TestPruneBatchPlansUseTheFinishedIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	insertFinished(t, pool, "old", 50000, 48*time.Hour)
	addEffects(t, pool, "old")
	_, err := pool.Exec(ctx, `INSERT INTO tenure.jobs (kind, payload) SELECT 'live', '{}' FROM generate_series(1, 50000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs; ANALYZE tenure.effects")
	require.NoError(t, err)

	for _, name := range []string{"PruneFinishedBatch", "PruneDeadBatch"} {
		sql, order := plantest.SQL(t, name)
		require.Equal(t, []string{"before", "after", "max_jobs"}, order, name)
		plan := plantest.Explain(t, pool, false, sql, time.Now().Add(-time.Hour), time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), 10000)
		var indexes []string
		plantest.Walk(plan, func(n plantest.Node) {
			if n.IndexName != "" {
				indexes = append(indexes, n.IndexName)
			}
			require.False(t, n.NodeType == "Seq Scan", "%s scans %s", name, n.Relation)
			require.NotEqual(t, "Hash Join", n.NodeType, name)
		})
		require.Contains(t, indexes, "jobs_finished_idx", name)
		require.Contains(t, indexes, "jobs_pkey", name)
		require.Contains(t, indexes, "effects_job_name", name)
	}
}

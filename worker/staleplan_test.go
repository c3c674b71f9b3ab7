package worker_test

// Issue 29, item 4: rolling migrations 0014–0015 back and applying them again under running
// workers changes the result type of statements every engine connection has cached (0014 turns
// columns of tenure.jobs into domains and back). PostgreSQL then refuses each cached statement
// once per connection with "cached plan must not change result type" (SQLSTATE 0A000); pgx
// drops the statement from that connection's cache, but the engine counted a claim error and
// backed off, failed the heartbeat, abandoned the finish (the job ran again) or skipped the
// sweep, connection after connection, for up to ~20 s.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// TestMigrationUnderLoadRecoversAtOnce: a worker runs a steady stream of short and
// heartbeated jobs while every migration from 0014 on is rolled back and applied again, twice (0014 and 0016 change column types).
// Expected: the engine re-runs a statement PostgreSQL refused as stale at once (it counts
// StalePlanRetries), so no claim, heartbeat, finish or sweep fails (their error counters stay
// at 0; claims may fail only while tenure.own, which this code's claims need, is missing),
// no lease is lost, and every job runs exactly once (generation 1) and succeeds.
func TestMigrationUnderLoadRecoversAtOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 16}})
	cfg.ReclaimEvery = 50 * time.Millisecond
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	runs := map[int64]int{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		d := 5 * time.Millisecond
		if job.Args.N%10 == 0 {
			d = 1500 * time.Millisecond // past lease/3: heartbeated
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, &worker.HandlerOptions{Retry: fastRetry, Timeout: time.Minute})
	c := newClient(t, pool, w)
	startWorker(t, w)

	var ids []int64
	var idsMu sync.Mutex
	var produced atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			// An insert may wait for (or, while 0014 is rolled back, fail against) the
			// migration: only the jobs that were inserted count.
			row, err := c.Insert(ctx, noopArgs{N: i}, &jobs.InsertOpts{Lease: 2 * time.Second})
			if err == nil {
				idsMu.Lock()
				ids = append(ids, row.Job.ID)
				idsMu.Unlock()
				produced.Add(1)
			}
		}
	}()
	// Every engine connection has cached its statements before the schema changes.
	waitFor(t, 30*time.Second, "the worker to warm up", func() bool {
		st := w.Stats()
		return st.Succeeded >= 100 && st.Heartbeats >= 5
	})
	// Likewise the claims read tenure.own's rows column by column (sqlc expands o.*), the
	// workflow columns of migration 0020 included: while the schema is rolled back the test
	// puts those columns back too (plain types: 0020's domains are gone), and drops them before
	// migrating up.
	// Every claim statement of this code owns its rows through tenure.own (migration 0019): a
	// schema without it fails every claim (SQLSTATE 42883: code newer than the schema), which is
	// not what this test is about. While the schema is rolled back the test puts the function
	// back as 0019 creates it (and removes it before migrating up), so the window exercises the
	// column type changes, tenure.own's rows included. Only in the two gaps (between the
	// rollback and the function's return, between its removal and the migration back up, each
	// with 100 ms of slack for claims in flight) may claims fail, and then only for lack of it.
	var own migrations.Migration
	for _, m := range migrations.All() {
		if m.Name == "own" {
			own = m
		}
	}
	require.NotEmpty(t, own.Up, "migration 0019_own")
	// The steps back to below 0014: the migrations from 0014 on (numbers may skip).
	downSteps := 0
	for _, m := range migrations.All() {
		if m.Version >= 14 {
			downSteps++
		}
	}
	var gapErrors, gapEngineErrors int64
	engineErrors := func(st worker.Stats) int64 {
		return st.HeartbeatErrors + st.ReclaimErrors + st.FinishRetries + st.FinishAbandoned
	}
	gap := func(change func()) {
		st0 := w.Stats()
		before := st0.ClaimErrors
		change()
		time.Sleep(100 * time.Millisecond)
		st := w.Stats()
		if n := engineErrors(st) - engineErrors(st0); n > 0 {
			gapEngineErrors += n // (Stats keeps only the last error, a claim's as often as not)
		}
		if n := st.ClaimErrors - before; n > 0 {
			gapErrors += n
			// Stats keeps one last error for every engine statement: in the gap it may be the
			// registry's or a heartbeat's as well as a claim's, each failing for the same lack.
			require.Regexp(t, `tenure\.own|workflow_id|task_name|sequence_key|deps_pending|has_dependents|progress|does not exist`, st.LastError,
				"a claim failed while tenure.own or 0020's columns were missing, for another reason")
		}
	}
	for range 2 {
		// Back to below 0014 (which, like 0016, changes column types of tenure.jobs) and up again.
		gap(func() {
			_, err = migrations.Down(ctx, pool, downSteps)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, flowColumnsUp)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, own.Up)
			require.NoError(t, err)
		})
		time.Sleep(500 * time.Millisecond) // the engine runs its statements on the old types
		gap(func() {
			_, err = pool.Exec(ctx, own.Down)
			require.NoError(t, err)
			_, err = pool.Exec(ctx, flowColumnsDown)
			require.NoError(t, err)
			_, err = migrations.Up(ctx, pool)
			require.NoError(t, err)
		})
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	idsMu.Lock()
	defer idsMu.Unlock()
	waitFor(t, 60*time.Second, "every inserted job to succeed", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND state = 'succeeded'", ids).Scan(&n))
		return n == len(ids)
	})
	st := w.Stats()
	t.Logf("%d jobs; stale statements re-run: %d; claim errors %d, heartbeat errors %d, sweep errors %d, finishes retried %d / abandoned %d",
		len(ids), st.StalePlanRetries, st.ClaimErrors, st.HeartbeatErrors, st.ReclaimErrors, st.FinishRetries, st.FinishAbandoned)
	require.Equal(t, gapErrors, st.ClaimErrors, "claim errors besides those while tenure.own was missing: %+v", st)
	// Since 0021 the finishes, the heartbeat and the sweep write tenure.jobs.progress, which the
	// rollback removes until the test puts it back: in the gaps they may fail too (code newer
	// than its schema: migrate before deploying), so a job may then be reclaimed and run again.
	// Outside the gaps nothing fails (gapEngineErrors counts what failed inside them).
	require.Equal(t, gapEngineErrors, engineErrors(st),
		"heartbeat, sweep or finish errors outside the schema gaps: %+v", st)
	var twice int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND generation <> 1", ids).Scan(&twice))
	require.LessOrEqual(t, int64(twice), st.FinishAbandoned+st.LeasesLost+st.Reclaimed,
		"a job ran again without a finish abandoned or a lease lost in a gap: %+v", st)
	if gapEngineErrors == 0 {
		require.Zero(t, twice, "jobs claimed more than once with no error in the gaps")
		mu.Lock()
		for _, id := range ids {
			require.Equal(t, 1, runs[id], "job %d's handler runs", id)
		}
		mu.Unlock()
	}
	require.Positive(t, st.StalePlanRetries, "the schema change made cached statements stale: %+v", st)
}

// The columns migration 0020 adds to tenure.jobs, as TestMigrationUnderLoadRecoversAtOnce puts
// them back below it.
const (
	flowColumnsUp = `ALTER TABLE tenure.jobs ADD COLUMN workflow_id uuid, ADD COLUMN task_name text,
		ADD COLUMN sequence_key text, ADD COLUMN deps_pending integer, ADD COLUMN has_dependents boolean,
		ADD COLUMN progress jsonb`
	flowColumnsDown = `ALTER TABLE tenure.jobs DROP COLUMN workflow_id, DROP COLUMN task_name,
		DROP COLUMN sequence_key, DROP COLUMN deps_pending, DROP COLUMN has_dependents, DROP COLUMN progress`
)

package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// Tests of the striped join (migration 0028): a dependent of 32 dependencies or more keeps its
// pending count in tenure.job_dep_stripes, and only a finish that brings a stripe to 0 takes
// the join's row lock, then re-reads every stripe in a later statement. Each test also runs
// against a deliberately broken settle_jobs (breakSettle) and checks that it sees the bug.

// breakSettle replaces tenure.settle_jobs in pool's database by its text with old replaced by
// new (exactly one occurrence).
func breakSettle(t *testing.T, pool *pgxpool.Pool, old, new string) {
	t.Helper()
	ctx := context.Background()
	var def string
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT pg_get_functiondef('tenure.settle_jobs(bigint[], text[])'::regprocedure)`).Scan(&def))
	require.Equal(t, 1, strings.Count(def, old), "broken variant: %q must occur once in settle_jobs", old)
	_, err := pool.Exec(ctx, strings.Replace(def, old, new, 1))
	require.NoError(t, err)
}

// The broken variants of settle_jobs the tests must detect.
const (
	// step 2 left out: a stripe's last finish does not wait for the join's row lock
	brokenNoLock = "PERFORM 1 FROM (SELECT j.id FROM tenure.jobs j WHERE j.id = ANY (z_ids) ORDER BY j.id"
	// step 3 releases when a stripe reaches 0, without re-reading the others
	brokenNoRecheck = "AND (p.cancel OR NOT EXISTS (SELECT 1 FROM tenure.job_dep_stripes t"
	// a failed edge under 'cancel' of a striped dependent does not cancel it
	brokenNoCancel = "WHERE z.cancel OR z.job_id = ANY (zeroed);"
)

// logReleases records every move of a job out of 'waiting' with its transaction
// (release_log), as TestSettleRacingFinishesReleaseOnce does.
func logReleases(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		CREATE TABLE release_log (job_id bigint, state text, txid bigint);
		CREATE FUNCTION log_release() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO release_log VALUES (NEW.id, NEW.state::text, txid_current());
			RETURN NULL;
		END $$;
		CREATE TRIGGER log_release AFTER UPDATE ON tenure.jobs FOR EACH ROW
			WHEN (OLD.state::text = 'waiting' AND NEW.state::text <> 'waiting') EXECUTE FUNCTION log_release();`)
	require.NoError(t, err)
}

type fanIn struct {
	pool   *pgxpool.Pool
	join   int64
	after  int64 // a task waiting on the join alone
	tasks  []int64
	stripe map[int64]int // task -> its edge's stripe into the join
	tokens map[int64]uuid.UUID
}

// newFanIn inserts a workflow of n tasks, a join waiting on all of them and a task after the
// join, and moves the n tasks to running.
func newFanIn(t *testing.T, pool *pgxpool.Pool, n int, pol jobs.OnDependencyFailure) *fanIn {
	t.Helper()
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	wf := jobs.NewWorkflow("striped", &jobs.WorkflowOpts{OnDependencyFailure: pol})
	var names []string
	for i := range n {
		name := fmt.Sprintf("t%03d", i)
		wf.Add(name, blobArgs{}, nil)
		names = append(names, name)
	}
	wf.Add("join", blobArgs{}, &jobs.TaskOpts{DependsOn: names})
	wf.Add("after", blobArgs{}, &jobs.TaskOpts{DependsOn: []string{"join"}})
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	f := &fanIn{pool: pool, join: res.Tasks["join"].ID, after: res.Tasks["after"].ID, stripe: map[int64]int{}}
	toks := runTasks(t, pool, wf.ID())
	require.Len(t, toks, n)
	f.tokens = toks
	for id := range toks {
		f.tasks = append(f.tasks, id)
	}
	slices.Sort(f.tasks)
	rows, err := pool.Query(ctx, `SELECT dep_id, stripe FROM tenure.job_deps WHERE job_id = $1`, f.join)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var s *int16
		require.NoError(t, rows.Scan(&id, &s))
		require.NotNil(t, s, "an edge into a join of %d dependencies has a stripe", n)
		f.stripe[id] = int(*s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, f.stripe, n)
	return f
}

// finish completes ids (CompleteMany) in one transaction and commits it.
func (f *fanIn) finish(t *testing.T, ids ...int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	n, err := completeMany(ctx, tx, ids, f.tokens)
	require.NoError(t, err)
	require.Equal(t, len(ids), n)
	require.NoError(t, tx.Commit(ctx))
}

// state returns a job's state, deps_pending and the sum of its stripes.
func (f *fanIn) state(t *testing.T, id int64) (string, int, int) {
	t.Helper()
	var st string
	var pending, stripes int
	require.NoError(t, f.pool.QueryRow(context.Background(), `
		SELECT state::text, coalesce(deps_pending, 0),
		       (SELECT coalesce(sum(pending), 0)::int FROM tenure.job_dep_stripes WHERE job_id = $1)
		FROM tenure.jobs WHERE id = $1`, id).Scan(&st, &pending, &stripes))
	return st, pending, stripes
}

func releases(t *testing.T, pool *pgxpool.Pool, id int64) []int64 {
	t.Helper()
	var txids []int64
	rows, err := pool.Query(context.Background(), `SELECT txid FROM release_log WHERE job_id = $1 AND state = 'ready'`, id)
	require.NoError(t, err)
	for rows.Next() {
		var x int64
		require.NoError(t, rows.Scan(&x))
		txids = append(txids, x)
	}
	require.NoError(t, rows.Err())
	return txids
}

// twoLastStripes finishes every task of a 64-task fan-in (8 stripes of 8) but one in stripe a
// and one in stripe b, then finishes those two in concurrent transactions: T1 first (it zeroes
// its stripe, locks the join, sees b's stripe still at 1), T2 while T1 is open (it zeroes b's
// stripe, then must wait for T1's lock), T1 commits, then T2. Returns the join's state, its
// releases' transactions, T2's transaction id and whether T2 was seen waiting for a lock.
func twoLastStripes(t *testing.T, variant string) (state string, released []int64, t2 int64, t2Waited bool) {
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 6 })
	ctx := context.Background()
	logReleases(t, pool)
	if variant != "" {
		breakSettle(t, pool, variant, "PERFORM 1 FROM (SELECT j.id FROM tenure.jobs j WHERE j.id = ANY ('{}'::bigint[]) ORDER BY j.id")
	}
	f := newFanIn(t, pool, 64, "")
	var lastA, lastB int64
	var rest []int64
	for _, id := range f.tasks {
		switch {
		case f.stripe[id] == 0 && lastA == 0:
			lastA = id
		case f.stripe[id] == 1 && lastB == 0:
			lastB = id
		default:
			rest = append(rest, id)
		}
	}
	f.finish(t, rest...)
	st, _, left := f.state(t, f.join)
	require.Equal(t, "waiting", st)
	require.Equal(t, 2, left, "two edges left, one in each of two stripes")

	tx1, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx1.Rollback(ctx)
	n, err := completeMany(ctx, tx1, []int64{lastA}, f.tokens)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	type result struct {
		txid int64
		err  error
	}
	done := make(chan result, 1)
	var pid uint32
	tx2, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(ctx)
	require.NoError(t, tx2.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	go func() {
		var r result
		if _, r.err = completeMany(ctx, tx2, []int64{lastB}, f.tokens); r.err == nil {
			r.err = tx2.QueryRow(ctx, `SELECT txid_current()`).Scan(&r.txid)
		}
		done <- r
	}()
	// T2 either finishes its statement or waits for a lock; either is what the variant does.
	var r result
	finished := false
	for !finished && !t2Waited {
		select {
		case r = <-done:
			finished = true
		case <-time.After(20 * time.Millisecond):
			var waiting bool
			require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)`,
				int32(pid)).Scan(&waiting))
			t2Waited = waiting
		}
	}
	require.NoError(t, tx1.Commit(ctx))
	if !finished {
		r = <-done
	}
	require.NoError(t, r.err)
	require.NoError(t, tx2.Commit(ctx))
	st, _, _ = f.state(t, f.join)
	return st, releases(t, pool, f.join), r.txid, t2Waited
}

// TestStripedJoinLastStripesRace: the two last stripes of a join zeroed by concurrent
// transactions release it exactly once, from the transaction granted the join's lock second
// (it sees the first's committed zero). Without the lock (brokenNoLock) each sees the other's
// stripe at 1 and the release is lost: the test checks that it notices.
func TestStripedJoinLastStripesRace(t *testing.T) {
	t.Parallel()
	t.Run("settle_jobs", func(t *testing.T) {
		t.Parallel()
		st, rel, t2, waited := twoLastStripes(t, "")
		require.True(t, waited, "the second stripe's last finish waits for the join's row lock")
		require.Equal(t, "ready", st)
		require.Equal(t, []int64{t2}, rel, "released once, by the second transaction")
	})
	t.Run("broken: no lock", func(t *testing.T) {
		t.Parallel()
		st, rel, _, waited := twoLastStripes(t, brokenNoLock)
		require.False(t, waited)
		require.Equal(t, "waiting", st, "without the lock the release is lost (what this test detects)")
		require.Empty(t, rel)
	})
}

// stripeZeroedEarly finishes a 64-task fan-in so that one stripe reaches 0 while another still
// has two edges, then finishes those one at a time. Returns the join's state after each of the
// three steps.
func stripeZeroedEarly(t *testing.T, variant, replacement string) []string {
	pool := pgtest.NewPool(t)
	logReleases(t, pool)
	if variant != "" {
		breakSettle(t, pool, variant, replacement)
	}
	f := newFanIn(t, pool, 64, "")
	var a []int64 // the last of stripe 0
	var b []int64 // the last two of stripe 1
	var rest []int64
	for _, id := range f.tasks {
		switch {
		case f.stripe[id] == 0 && len(a) < 1:
			a = append(a, id)
		case f.stripe[id] == 1 && len(b) < 2:
			b = append(b, id)
		default:
			rest = append(rest, id)
		}
	}
	f.finish(t, rest...)
	var states []string
	for _, step := range [][]int64{a, b[:1], b[1:]} {
		f.finish(t, step...)
		st, _, _ := f.state(t, f.join)
		states = append(states, st)
	}
	return states
}

// TestStripedJoinNotReleasedEarly: a stripe brought to 0 while another still counts edges
// releases nothing; the last edge does, and the release sets deps_pending to 0 and deletes the
// stripes. Releasing on a zeroed stripe without re-reading the others (brokenNoRecheck)
// releases the join two dependencies early: the test checks that it notices.
func TestStripedJoinNotReleasedEarly(t *testing.T) {
	t.Parallel()
	t.Run("settle_jobs", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []string{"waiting", "waiting", "ready"}, stripeZeroedEarly(t, "", ""))
	})
	t.Run("broken: no recheck", func(t *testing.T) {
		t.Parallel()
		got := stripeZeroedEarly(t, brokenNoRecheck, "AND (p.cancel OR true OR NOT EXISTS (SELECT 1 FROM tenure.job_dep_stripes t")
		require.Equal(t, "ready", got[0], "released before its last dependencies succeeded (what this test detects)")
	})
	pool := pgtest.NewPool(t)
	f := newFanIn(t, pool, 40, "")
	f.finish(t, f.tasks...)
	st, pending, stripes := f.state(t, f.join)
	require.Equal(t, "ready", st)
	require.Zero(t, pending)
	require.Zero(t, stripes)
	var rows int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM tenure.job_dep_stripes`).Scan(&rows))
	require.Zero(t, rows, "a release deletes its stripes")
}

// failOne ends task id dead as the engine's FailMany would (the trigger settles any UPDATE
// that moves a job with dependents to a final state).
func failOne(t *testing.T, pool *pgxpool.Pool, id int64) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE tenure.jobs SET state = 'dead', finished_at = now(),
		claim_token = NULL, locked_by = NULL, locked_until = NULL WHERE id = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// TestStripedJoinDependencyFailure: a striped join whose dependency ends dead is cancelled
// (DEPENDENCY_FAILED) under the default policy, its own dependent too (the cascade), and the
// finishes of its other dependencies after that change neither; Delete removes its stripes.
// Under RunDependents the dead dependency counts and the join is released by the last finish.
// A variant that ignores the failed edge of a striped join (brokenNoCancel) leaves it waiting
// for ever: the test checks that it notices.
func TestStripedJoinDependencyFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cancelCase := func(t *testing.T, variant string) (join, after string) {
		pool := pgtest.NewPool(t)
		if variant != "" {
			breakSettle(t, pool, variant, "WHERE false OR z.job_id = ANY (zeroed);")
		}
		f := newFanIn(t, pool, 48, "")
		f.finish(t, f.tasks[:20]...)
		failOne(t, pool, f.tasks[20])
		f.finish(t, f.tasks[21:]...)
		join, _, _ = f.state(t, f.join)
		after, _, _ = f.state(t, f.after)
		if variant == "" {
			var code string
			require.NoError(t, pool.QueryRow(ctx, `SELECT last_error_code FROM tenure.jobs WHERE id = $1`, f.join).Scan(&code))
			require.Equal(t, "DEPENDENCY_FAILED", code)
			c, err := jobs.NewClient(pool, nil)
			require.NoError(t, err)
			require.NoError(t, c.Delete(ctx, f.join, jobs.Action{Actor: "test", Reason: "stripes go with the job"}))
			var rows int
			require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_dep_stripes WHERE job_id = $1`, f.join).Scan(&rows))
			require.Zero(t, rows, "Delete removes the job's stripes")
		}
		return join, after
	}
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		join, after := cancelCase(t, "")
		require.Equal(t, "cancelled", join)
		require.Equal(t, "cancelled", after, "the join's dependent is cancelled in the same round trip (cascade)")
	})
	t.Run("broken: no cancel", func(t *testing.T) {
		t.Parallel()
		join, _ := cancelCase(t, brokenNoCancel)
		require.Equal(t, "waiting", join, "a striped join not cancelled by its dead dependency (what this test detects)")
	})
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.NewPool(t)
		f := newFanIn(t, pool, 48, jobs.RunDependents)
		failOne(t, pool, f.tasks[0])
		f.finish(t, f.tasks[1:47]...)
		st, _, left := f.state(t, f.join)
		require.Equal(t, "waiting", st)
		require.Equal(t, 1, left)
		f.finish(t, f.tasks[47])
		st, _, _ = f.state(t, f.join)
		require.Equal(t, "ready", st, "a dead dependency under RunDependents counts as resolved")
	})
}

// TestStripedJoinsRacingFinishes: eight sessions finish 4 x 160 tasks, each feeding two of
// four striped joins (so one statement decrements stripes of two joins and may zero stripes
// of both), in random batches, a fifth rolled back and finished again later. No deadlock (the
// stripes are decremented in (job_id, stripe) order, the joins locked in id order), every join
// released exactly once by a transaction that finished one of its dependencies, nothing left
// in tenure.job_dep_stripes.
func TestStripedJoinsRacingFinishes(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 10 })
	ctx := context.Background()
	logReleases(t, pool)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	const tasks, joins, sessions = 640, 4, 8
	wf := jobs.NewWorkflow("striped-race", nil)
	deps := make([][]string, joins)
	for i := range tasks {
		name := fmt.Sprintf("t%03d", i)
		wf.Add(name, blobArgs{}, nil)
		deps[i%joins] = append(deps[i%joins], name)
		deps[(i+1)%joins] = append(deps[(i+1)%joins], name)
	}
	for j := range joins {
		wf.Add(fmt.Sprintf("join%d", j), blobArgs{}, &jobs.TaskOpts{DependsOn: deps[j]})
	}
	res, err := c.InsertWorkflow(ctx, wf)
	require.NoError(t, err)
	var striped int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT job_id) FROM tenure.job_dep_stripes`).Scan(&striped))
	require.Equal(t, joins, striped)
	tokens := runTasks(t, pool, wf.ID())

	var mu sync.Mutex
	left := make([]int64, 0, tasks)
	for id := range tokens {
		left = append(left, id)
	}
	// claims hand out ids roughly in order: batches of neighbours, taken from the low end
	slices.Sort(left)
	finishedBy := map[int64]int64{}
	deadlocks := 0
	take := func(r *rand.Rand) []int64 {
		mu.Lock()
		defer mu.Unlock()
		n := min(len(left), 1+r.IntN(24))
		b := slices.Clone(left[:n])
		left = left[n:]
		return b
	}
	giveBack := func(b []int64) { mu.Lock(); left = append(b, left...); mu.Unlock() }
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(s), 28))
			for idle := 0; idle < 50; {
				b := take(r)
				if len(b) == 0 {
					idle++
					time.Sleep(time.Millisecond)
					continue
				}
				idle = 0
				err := func() error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(ctx)
					n, err := completeMany(ctx, tx, b, tokens)
					if err != nil {
						return err
					}
					if n != len(b) {
						return fmt.Errorf("batch of %d completed %d", len(b), n)
					}
					if r.IntN(5) == 0 {
						err := tx.Rollback(ctx)
						giveBack(b)
						return err
					}
					var txid int64
					if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&txid); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					mu.Lock()
					for _, id := range b {
						finishedBy[id] = txid
					}
					mu.Unlock()
					return nil
				}()
				var pe *pgconn.PgError
				if errors.As(err, &pe) && pe.Code == "40P01" {
					mu.Lock()
					deadlocks++
					mu.Unlock()
					giveBack(b)
					continue
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, finishedBy, tasks)
	require.Zero(t, deadlocks, "deadlocks between finishing transactions")
	for j := range joins {
		id := res.Tasks[fmt.Sprintf("join%d", j)].ID
		rel := releases(t, pool, id)
		require.Len(t, rel, 1, "join%d released exactly once", j)
		byDep := false
		for _, d := range deps[j] {
			byDep = byDep || finishedBy[res.Tasks[d].ID] == rel[0]
		}
		require.True(t, byDep, "join%d released by a transaction that finished one of its dependencies", j)
		var st string
		var pending int
		require.NoError(t, pool.QueryRow(ctx, `SELECT state::text, deps_pending FROM tenure.jobs WHERE id = $1`, id).Scan(&st, &pending))
		require.Equal(t, "ready", st)
		require.Zero(t, pending)
	}
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.job_dep_stripes`).Scan(&rows))
	require.Zero(t, rows)
}

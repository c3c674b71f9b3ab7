package jobs_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

var waitAct = jobs.Action{Actor: "test", Reason: "wait test"}

// listenSessions counts the sessions of the test database whose last statement is a LISTEN on
// a done channel.
func listenSessions(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %\_done'`).Scan(&n))
	return n
}

// finishAll ends every ready job cancelled the way a finish batch does: one statement, one
// NOTIFY per 350 ids.
func finishAll(t *testing.T, pool *pgxpool.Pool, notify bool) {
	t.Helper()
	sql := `WITH d AS (UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), cancel_requested_at = now()
		WHERE state = 'ready' RETURNING id)
		SELECT count(*) FROM d`
	if notify {
		sql = `WITH d AS (UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), cancel_requested_at = now()
		WHERE state = 'ready' RETURNING id)
		SELECT count(pg_notify('tenure_done', c.ids)) FROM (SELECT string_agg(x.id::text, ',') AS ids
			FROM (SELECT id, row_number() OVER () AS rn FROM d) x GROUP BY (x.rn - 1) / 350) c`
	}
	_, err := pool.Exec(context.Background(), sql)
	require.NoError(t, err)
}

func TestWaitAfterTheJobFinished(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour}) // no poll: the first read answers
	require.NoError(t, err)
	res, err := c.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	_, err = c.Cancel(ctx, res.Job.ID, waitAct)
	require.NoError(t, err)

	// The waiter starts after the job ended (no notification will come): it reads the row
	// once its LISTEN is up.
	row, err := c.Wait(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateCancelled, row.State)
	require.NotNil(t, row.FinishedAt)

	_, _, err = jobs.WaitOutput[map[string]int](ctx, c, res.Job.ID)
	var ns *jobs.NotSucceededError
	require.ErrorAs(t, err, &ns)
	require.ErrorIs(t, err, jobs.ErrNotSucceeded)
	require.Equal(t, generics.JobStateCancelled, ns.State)
}

func TestWaitWokenByTheCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour}) // only the NOTIFY can wake it
	require.NoError(t, err)
	res, err := c.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	got := make(chan *generics.JobRow, 1)
	go func() {
		row, err := c.Wait(ctx, res.Job.ID)
		if err != nil {
			t.Error(err)
		}
		got <- row
	}()
	for jobs.Waiters(c) == 0 || jobs.WaitChecks(c) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	_, err = c.Cancel(ctx, res.Job.ID, waitAct) // ready -> cancelled notifies tenure_done
	require.NoError(t, err)
	row := <-got
	require.Equal(t, generics.JobStateCancelled, row.State)
}

func TestWaitNotFoundAndDeleted(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour})
	require.NoError(t, err)
	_, err = c.Wait(ctx, 424242)
	require.ErrorIs(t, err, jobs.ErrNotFound)

	res, err := c.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { _, err := c.Wait(ctx, res.Job.ID); errc <- err }()
	for jobs.Waiters(c) == 0 || jobs.WaitChecks(c) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, c.Delete(ctx, res.Job.ID, waitAct))
	require.ErrorIs(t, <-errc, jobs.ErrNotFound)
}

func TestWaitContextCancel(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	res, err := c.Insert(context.Background(), emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = c.Wait(ctx, res.Job.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Zero(t, jobs.Waiters(c), "a cancelled waiter leaves the registry")
	_, err = jobs.NewClient(pool, &jobs.Config{WaitPoll: -time.Second})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
}

// TestWaitManyWaitersShareOneListen: 10,000 waiters of one client hold one LISTEN session,
// and every one of them returns when its job ends.
func TestWaitManyWaitersShareOneListen(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPoolWith(t, func(cfg *pgxpool.Config) { cfg.MaxConns = 4 })
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour}) // the NOTIFYs alone
	require.NoError(t, err)
	const n = 10000
	params := make([]jobs.InsertManyParams, n)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: emailArgs{To: "a@b.c"}}
	}
	_, err = c.InsertManyFast(ctx, params)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, "SELECT id FROM tenure.jobs ORDER BY id")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)

	var wg sync.WaitGroup
	var cancelled, failed atomic.Int64
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row, err := c.Wait(ctx, id)
			if err != nil || row.ID != id {
				failed.Add(1)
				return
			}
			if row.State == generics.JobStateCancelled {
				cancelled.Add(1)
			}
		}()
	}
	for jobs.Waiters(c) < n {
		time.Sleep(10 * time.Millisecond)
	}
	// The registry's goroutine opens its LISTEN after the first waiter registers, on its own
	// schedule: at CI's load the waiters had all registered before its LISTEN had run
	// (pg_stat_activity showed none). Wait for it, then count.
	require.Eventually(t, func() bool { return listenSessions(t, pool) > 0 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, 1, listenSessions(t, pool), "one LISTEN session for every waiter")
	require.EqualValues(t, 1, jobs.WaitListens(c))
	checksBefore := jobs.WaitChecks(c)
	finishAll(t, pool, true)
	wg.Wait()
	require.Zero(t, failed.Load())
	require.EqualValues(t, n, cancelled.Load())
	t.Logf("10,000 waiters: %d re-read statements while registering, %d after the finish", checksBefore, jobs.WaitChecks(c)-checksBefore)
}

// TestWaitListenConnectionLost: the LISTEN session is killed; a job that ends meanwhile is
// still returned (the poll, and the re-read after the reconnect).
func TestWaitListenConnectionLost(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: 200 * time.Millisecond})
	require.NoError(t, err)
	pids := make(chan uint32, 4)
	jobs.SetWaitConnHook(c, func(conn *pgx.Conn) { pids <- conn.PgConn().PID() })
	res, err := c.Insert(ctx, emailArgs{To: "a@b.c"}, nil)
	require.NoError(t, err)
	got := make(chan *generics.JobRow, 1)
	go func() {
		row, err := c.Wait(ctx, res.Job.ID)
		if err != nil {
			t.Error(err)
		}
		got <- row
	}()
	pid := <-pids
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(t, ok)
	finishAll(t, pool, false) // no notification at all: only a read can find it
	row := <-got
	require.Equal(t, generics.JobStateCancelled, row.State)
	select {
	case <-pids: // reconnected (when the loss was seen before the job was found)
	default:
	}
}

// A job deleted on success (worker.HandlerOptions.DeleteOnSuccess) between InsertAndWait's
// insert and its wait, as its finish does it (the row deleted, s<id> on the done channel): the
// registry listened before the insert, so InsertAndWait reports the success (ErrOutputNotKept),
// not ErrNotFound. A Wait that starts after the delete, with no listener up then, gets
// ErrNotFound.
func TestInsertAndWaitSeesDeleteOnSuccess(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	finish := func(id int64) {
		_, err := pool.Exec(ctx, `WITH g AS (DELETE FROM tenure.jobs WHERE id = $1 RETURNING id)
			SELECT pg_notify('tenure_done', 's' || g.id::text) FROM g`, id)
		require.NoError(t, err)
	}
	for range 3 {
		c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour})
		require.NoError(t, err)
		jobs.SetInsertAndWaitHook(c, finish)
		row, _, err := jobs.InsertAndWait[int](ctx, c, emailArgs{To: "a@b"}, nil)
		require.ErrorIs(t, err, jobs.ErrOutputNotKept)
		require.Equal(t, generics.JobStateSucceeded, row.State)
	}
	c, err := jobs.NewClient(pool, &jobs.Config{WaitPoll: time.Hour})
	require.NoError(t, err)
	res, err := c.Insert(ctx, emailArgs{To: "a@b"}, nil)
	require.NoError(t, err)
	finish(res.Job.ID)
	_, err = c.Wait(ctx, res.Job.ID)
	require.ErrorIs(t, err, jobs.ErrNotFound)
}

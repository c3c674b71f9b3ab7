package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// dbClock is a fake for the database clock the rate-limit windows are counted on: the claim
// statement reads clock_timestamp() (db/queries.sql, ClaimLimits), and a connection whose
// search_path names a schema with its own clock_timestamp() before pg_catalog calls that one.
// Leases and due times stay on now(), the real clock.
type dbClock struct {
	t    testing.TB
	pool *pgxpool.Pool // the test's pool (real clock)
}

func newDBClock(t testing.TB, pool *pgxpool.Pool, at time.Time) *dbClock {
	ctx := context.Background()
	for _, stmt := range []string{
		`CREATE SCHEMA tenure_testclock`,
		`CREATE TABLE tenure_testclock.at (t timestamptz NOT NULL)`,
		`CREATE FUNCTION tenure_testclock.clock_timestamp() RETURNS timestamptz LANGUAGE sql VOLATILE AS 'SELECT t FROM tenure_testclock.at'`,
	} {
		_, err := pool.Exec(ctx, stmt)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO tenure_testclock.at VALUES ($1)`, at)
	require.NoError(t, err)
	return &dbClock{t: t, pool: pool}
}

func (c *dbClock) set(at time.Time) {
	_, err := c.pool.Exec(context.Background(), `UPDATE tenure_testclock.at SET t = $1`, at)
	require.NoError(c.t, err)
}

// onFakeClock is a pool like pool's whose connections (and the engine's, copied from it) read
// the fake clock_timestamp().
func (c *dbClock) onFakeClock(pool *pgxpool.Pool) *pgxpool.Pool {
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = "tenure_testclock, pg_catalog, public"
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(c.t, err)
	c.t.Cleanup(p.Close)
	return p
}

// TestRateLimitWindowsOnAFakeDatabaseClock: two workers, 20 slots each, 45 jobs ready at once
// under a rate of 10 starts per minute, the database clock held still and moved by the test.
// In each window exactly 10 jobs are claimed, however many claims the workers run (each seen
// held back by the limit before the clock moves): a microsecond before the window's end still
// 10, at its start 10 more; a window skipped adds no credit to the next. Deterministic: the
// windows do not depend on how fast the machine is.
func TestRateLimitWindowsOnAFakeDatabaseClock(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	const rate, per = 10, time.Minute
	// A window in the future of the real clock: the flow prune (on now()) keeps its rows.
	w0 := time.Now().Add(24 * time.Hour).Truncate(per)
	clk := newDBClock(t, pool, w0)

	var ws []*worker.Worker
	for i := range 2 {
		cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 20,
			Limits: []worker.Limit{{Kind: "lim", Rate: rate, Per: per}}}})
		cfg.ID = fmt.Sprintf("rate-clock-%d", i)
		w, err := worker.New(clk.onFakeClock(pool), cfg)
		require.NoError(t, err)
		worker.MustRegister(w, func(context.Context, *generics.Job[limArgs]) error { return nil }, nil)
		ws = append(ws, w)
	}
	c := newClient(t, pool, ws[0])
	ps := make([]jobs.InsertManyParams, 45)
	for i := range ps {
		ps[i] = jobs.InsertManyParams{Args: limArgs{N: i}}
	}
	_, err := c.InsertMany(ctx, ps)
	require.NoError(t, err)

	claimed := func() (n, limited int64) {
		for _, w := range ws {
			st := w.Stats()
			n, limited = n+st.Claimed, limited+st.LimitedClaims
		}
		return n, limited
	}
	// window waits until want jobs were claimed and then at least three more claims were held
	// back by the limit, and checks that no more were claimed.
	window := func(at time.Time, want int64) {
		t.Helper()
		clk.set(at)
		waitFor(t, 30*time.Second, fmt.Sprintf("%d claimed at %v", want, at.Sub(w0)), func() bool { n, _ := claimed(); return n >= want })
		_, held := claimed()
		waitFor(t, 30*time.Second, "claims held back by the limit", func() bool { _, l := claimed(); return l >= held+3 })
		n, _ := claimed()
		require.Equal(t, want, n, "claimed at %v after the first window's start", at.Sub(w0))
	}
	for _, w := range ws {
		startWorker(t, w)
	}
	window(w0, 10)
	window(w0.Add(per/2), 10)
	window(w0.Add(per-time.Microsecond), 10)
	window(w0.Add(per), 20)
	window(w0.Add(2*per-time.Microsecond), 20)
	window(w0.Add(4*per), 30) // two windows skipped: still 10, no credit carried
	window(w0.Add(5*per), 40)
	clk.set(w0.Add(6 * per)) // the last 5
	waitFor(t, 30*time.Second, "every job", func() bool { return countState(t, pool, "succeeded") == 45 })
	n, _ := claimed()
	require.EqualValues(t, 45, n, "each job claimed once")
}

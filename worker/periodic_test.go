package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/cron"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// tickArgs is the periodic test kind: the tick it was enqueued for.
type tickArgs struct {
	Schedule string    `json:"schedule"`
	At       time.Time `json:"at"`
	Missed   int       `json:"missed"`
	OnStart  bool      `json:"on_start"`
}

func (tickArgs) Kind() string        { return "tick" }
func (tickArgs) PayloadVersion() int { return 1 }

func tickJob(name string, s worker.Schedule, o *worker.PeriodicOptions) worker.PeriodicJob {
	return worker.NewPeriodicJob(name, s, func(_ context.Context, t worker.Tick) (tickArgs, error) {
		return tickArgs{Schedule: t.Name, At: t.At, Missed: t.Missed, OnStart: t.OnStart}, nil
	}, o)
}

// ownPool is a pool of its own on pool's database: a worker "process" with its own connections.
func ownPool(t testing.TB, pool *pgxpool.Pool) *pgxpool.Pool {
	p, err := pgxpool.New(context.Background(), pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// periodicWorker is a worker on its own pool that runs tick jobs and lists the schedules.
func periodicWorker(t testing.TB, pool *pgxpool.Pool, id string, ps ...worker.PeriodicJob) *worker.Worker {
	cfg := fastConfig(nil)
	cfg.ID = id
	cfg.Periodic = ps
	w, err := worker.New(ownPool(t, pool), cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[tickArgs]) error { return nil }, nil)
	return w
}

type tickRow struct {
	ID    int64
	Args  tickArgs
	RunAt time.Time
	// Released: a stop gave the job back at least once (a claim that returned after Stop
	// began): ReleaseMany made it due at the release, so RunAt no longer shows the tick's.
	// Each release keeps the generation and un-charges the attempt, so generation > attempts.
	Released bool
}

func tickJobs(t testing.TB, pool *pgxpool.Pool, schedule string) []tickRow {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT id, payload, run_at, generation > attempts FROM tenure.jobs WHERE kind = 'tick' AND payload->>'schedule' = $1 ORDER BY (payload->>'at')::timestamptz, id`, schedule)
	require.NoError(t, err)
	defer rows.Close()
	var out []tickRow
	for rows.Next() {
		var r tickRow
		var raw []byte
		require.NoError(t, rows.Scan(&r.ID, &raw, &r.RunAt, &r.Released))
		a, err := generics.Decode[tickArgs](generics.NewRegistry(), raw, 1)
		require.NoError(t, err)
		r.Args = a
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestPeriodicConfigErrors(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ok := func(context.Context, worker.Tick) (tickArgs, error) { return tickArgs{}, nil }
	for _, c := range []struct {
		name  string
		p     []worker.PeriodicJob
		also  error
		inMsg string
	}{
		{"zero interval", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(0), ok, nil)}, nil, "no schedule"},
		{"sub-second", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(500*time.Millisecond), ok, nil)}, nil, "below 1s"},
		{"zero schedule", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Schedule{}, ok, nil)}, nil, "no schedule"},
		{"bad cron", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Cron("61 * * * *", ""), ok, nil)}, cron.ErrInvalidSpec, "61"},
		{"never fires", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Cron("0 0 31 2 *", ""), ok, nil)}, cron.ErrInvalidSpec, "never"},
		{"unknown zone", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Cron("* * * * *", "Europe/Atlantis"), ok, nil)}, cron.ErrUnknownTimeZone, "Atlantis"},
		{"empty name", []worker.PeriodicJob{worker.NewPeriodicJob("", worker.Every(time.Second), ok, nil)}, nil, "name"},
		{"nil args", []worker.PeriodicJob{worker.NewPeriodicJob[tickArgs]("a", worker.Every(time.Second), nil, nil)}, nil, "args"},
		{"duplicate", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(time.Second), ok, nil), worker.NewPeriodicJob("a", worker.Every(time.Hour), ok, nil)}, nil, "twice"},
		{"run at", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(time.Second), ok, &worker.PeriodicOptions{Insert: &jobs.InsertOpts{Delay: time.Second}})}, nil, "Delay"},
		{"negative jitter", []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(time.Second), ok, &worker.PeriodicOptions{Jitter: -1})}, nil, "Jitter"},
	} {
		_, err := worker.New(pool, &worker.Config{Periodic: c.p})
		require.ErrorIs(t, err, worker.ErrInvalidConfig, c.name)
		require.ErrorIs(t, err, worker.ErrInvalidSchedule, c.name)
		if c.also != nil {
			require.ErrorIs(t, err, c.also, c.name)
		}
		require.ErrorContains(t, err, c.inMsg, c.name)
	}
	// A kind nobody registered is refused at Start, before anything is written.
	w, err := worker.New(pool, &worker.Config{Periodic: []worker.PeriodicJob{worker.NewPeriodicJob("a", worker.Every(time.Second), ok, nil)}})
	require.NoError(t, err)
	err = w.Start(context.Background())
	require.ErrorIs(t, err, worker.ErrInvalidSchedule)
	require.ErrorContains(t, err, `kind "tick" is not registered`)
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.periodic").Scan(&n))
	require.Zero(t, n)
}

// TestPeriodicOneJobPerTickAcrossWorkers: four workers, each on its own pool, share a
// 1-second schedule (and a 1-hour one) for six ticks. Every tick between the first and the
// last has exactly one job (no gap, no duplicate), each due at its tick plus the jitter, and
// the workers' counters add up to the jobs in the table.
func TestPeriodicOneJobPerTickAcrossWorkers(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	const jitter = 300 * time.Millisecond
	ws := make([]*worker.Worker, 4)
	for i := range ws {
		ws[i] = periodicWorker(t, pool, fmt.Sprintf("periodic-%d", i),
			tickJob("every-second", worker.Every(time.Second), &worker.PeriodicOptions{Jitter: jitter}),
			tickJob("hourly", worker.Every(time.Hour), nil))
	}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { startWorker(t, w) })
	}
	wg.Wait()
	// Six ticks' jobs (about 6 s; a loaded machine takes longer, and catches up with Missed).
	waitFor(t, 2*time.Minute, "six ticks", func() bool { return len(tickJobs(t, pool, "every-second")) >= 6 })
	var enqueued int64
	for _, w := range ws {
		require.NoError(t, stopWorker(t, w, 10*time.Second))
		st := w.Stats()
		enqueued += st.PeriodicEnqueued
		require.Zero(t, st.PeriodicErrors)
	}
	got := tickJobs(t, pool, "every-second")
	require.GreaterOrEqual(t, len(got), 6)
	require.Equal(t, int64(len(got)), enqueued, "jobs in the table = enqueues the workers counted")
	missed := 0
	for i, r := range got {
		missed += r.Args.Missed
		require.Equal(t, r.Args.At, r.Args.At.Truncate(time.Second), "ticks are whole seconds")
		d := r.RunAt.Sub(r.Args.At)
		if r.Released {
			// Claimed while its worker's Stop began and given back: due at the release.
			require.True(t, d >= 0, "released: run_at %v is before its tick %v", r.RunAt, r.Args.At)
		} else {
			require.True(t, d >= 0 && d < jitter, "run_at %v is tick %v + %v, want [0, %v)", r.RunAt, r.Args.At, d, jitter)
		}
		if i > 0 {
			// One period after the previous tick, or, if every worker fell more than a period
			// behind (a starved machine), the catch-up job's Missed accounts for the rest.
			require.Equal(t, time.Duration(1+r.Args.Missed)*time.Second, r.Args.At.Sub(got[i-1].Args.At),
				"tick %d follows tick %d with no gap and no duplicate", i, i-1)
		}
	}
	released := 0
	for _, r := range got {
		if r.Released {
			released++
		}
	}
	if released > 0 {
		t.Logf("%d tick jobs were claimed while their worker's Stop began and given back", released)
	}
	if missed > 0 {
		t.Logf("%d ticks were caught up (CatchUpOnce) rather than enqueued on their own: the workers fell behind", missed)
	}
	require.LessOrEqual(t, missed, 2)
	require.Empty(t, tickJobs(t, pool, "hourly"), "no hourly tick passed")
	c := newClient(t, pool, nil)
	ps, err := c.Periodic(context.Background())
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, "every-second", ps[0].Name)
	require.Equal(t, "every 1s", ps[0].Spec)
	require.Equal(t, "tick", ps[0].Kind)
	require.Equal(t, "default", ps[0].Queue)
	require.Equal(t, got[len(got)-1].ID, *ps[0].LastJobID)
	require.True(t, ps[0].LastTickAt.Equal(got[len(got)-1].Args.At))
	require.True(t, ps[0].NextRunAt.After(*ps[0].LastTickAt))
	require.Zero(t, ps[0].Missed)
	require.Equal(t, "every 1h0m0s", ps[1].Spec)
	require.Nil(t, ps[1].LastJobID)
	require.Equal(t, ps[1].NextRunAt, ps[1].NextRunAt.Truncate(time.Hour))
}

// TestPeriodicCatchUp: ticks missed while no worker ran (the stored next tick left in the past)
// give one job under CatchUpOnce (for the latest tick, counting the others), and none under
// CatchUpSkip when the latest is older than MisfireGrace; the schedule then resumes at its
// next tick after now.
func TestPeriodicCatchUp(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	once := tickJob("once", worker.Every(time.Hour), nil)
	skip := tickJob("skip", worker.Cron("0 0 1 1 *", "Europe/Berlin"), &worker.PeriodicOptions{CatchUp: worker.CatchUpSkip})
	w := periodicWorker(t, pool, "first", once, skip)
	startWorker(t, w)
	require.NoError(t, stopWorker(t, w, 5*time.Second))

	// Downtime: the stored ticks are 10 hours / several years old.
	_, err := pool.Exec(ctx, `UPDATE tenure.periodic SET next_run_at = date_trunc('hour', now()) - interval '10 hours' WHERE name = 'once'`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE tenure.periodic SET next_run_at = '2020-01-01 00:00:00+01' WHERE name = 'skip'`)
	require.NoError(t, err)
	var dbNow, stored time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT now(), next_run_at FROM tenure.periodic WHERE name = 'once'").Scan(&dbNow, &stored))

	w2 := periodicWorker(t, pool, "second", once, skip)
	startWorker(t, w2)
	waitFor(t, 10*time.Second, "catch-up job", func() bool { return len(tickJobs(t, pool, "once")) == 1 })
	waitFor(t, 10*time.Second, "skip bookkeeping", func() bool { return w2.Stats().PeriodicSkipped > 0 })
	require.NoError(t, stopWorker(t, w2, 5*time.Second))

	got := tickJobs(t, pool, "once")
	require.Len(t, got, 1)
	// The latest passed hour (normally dbNow's; the next one if an hour began meanwhile).
	at := got[0].Args.At
	require.True(t, at.Equal(at.Truncate(time.Hour)) && !at.Before(dbNow.Truncate(time.Hour)) && !at.After(dbNow.Truncate(time.Hour).Add(time.Hour)),
		"the job is for the latest tick: %v", at)
	require.Equal(t, int(at.Sub(stored)/time.Hour), got[0].Args.Missed, "it stands for the earlier ticks (10 unless an hour began)")
	require.GreaterOrEqual(t, got[0].Args.Missed, 10)
	require.Empty(t, tickJobs(t, pool, "skip"), "CatchUpSkip drops ticks older than MisfireGrace")

	ps, err := newClient(t, pool, nil).Periodic(ctx)
	require.NoError(t, err)
	require.Equal(t, "once", ps[0].Name)
	require.Equal(t, int64(got[0].Args.Missed), ps[0].Missed)
	require.True(t, ps[0].NextRunAt.Equal(at.Add(time.Hour)))
	require.Equal(t, "skip", ps[1].Name)
	require.Equal(t, "cron 0 0 1 1 * Europe/Berlin", ps[1].Spec)
	// 2020-01-01 .. this year's January 1st: one yearly tick per year, all dropped.
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	year := dbNow.In(berlin).Year()
	require.Equal(t, int64(year-2020+1), ps[1].Missed)
	require.Equal(t, int64(year-2020+1), w2.Stats().PeriodicSkipped)
	require.True(t, ps[1].NextRunAt.Equal(time.Date(year+1, 1, 1, 0, 0, 0, 0, berlin)), "next tick %v", ps[1].NextRunAt)
	require.Nil(t, ps[1].LastJobID)
}

// TestPeriodicRunOnStart: three workers starting together with RunOnStart enqueue one job
// between them; a worker restarting within the period enqueues none.
func TestPeriodicRunOnStart(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	p := tickJob("on-start", worker.Every(time.Hour), &worker.PeriodicOptions{RunOnStart: true})
	ws := []*worker.Worker{periodicWorker(t, pool, "a", p), periodicWorker(t, pool, "b", p), periodicWorker(t, pool, "c", p)}
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { startWorker(t, w) })
	}
	wg.Wait()
	got := tickJobs(t, pool, "on-start")
	require.Len(t, got, 1)
	require.True(t, got[0].Args.OnStart)
	for _, w := range ws {
		require.NoError(t, stopWorker(t, w, 5*time.Second))
	}
	w := periodicWorker(t, pool, "d", p)
	startWorker(t, w)
	require.Len(t, tickJobs(t, pool, "on-start"), 1, "a restart within the period enqueues nothing")
}

// A changed spec restarts the schedule at the new spec's first tick; an unchanged one keeps
// the stored tick.
func TestPeriodicSpecChange(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	next := func() (spec string, at time.Time) {
		require.NoError(t, pool.QueryRow(ctx, "SELECT spec, next_run_at FROM tenure.periodic WHERE name = 'x'").Scan(&spec, &at))
		return
	}
	w := periodicWorker(t, pool, "a", tickJob("x", worker.Every(24*time.Hour), nil))
	startWorker(t, w)
	_, err := pool.Exec(ctx, "UPDATE tenure.periodic SET next_run_at = next_run_at + interval '7 days'")
	require.NoError(t, err)
	_, before := next()
	startWorker(t, periodicWorker(t, pool, "b", tickJob("x", worker.Every(24*time.Hour), nil)))
	spec, after := next()
	require.Equal(t, "every 24h0m0s", spec)
	require.True(t, after.Equal(before), "unchanged spec keeps its tick")
	startWorker(t, periodicWorker(t, pool, "c", tickJob("x", worker.Cron("30 4 * * *", "Asia/Tokyo"), nil)))
	spec, after = next()
	require.Equal(t, "cron 30 4 * * * Asia/Tokyo", spec)
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	require.Equal(t, "04:30", after.In(tokyo).Format("15:04"))
	require.True(t, after.Before(before))
}

// An args function that fails rolls the tick back: the tick is retried, not lost.
func TestPeriodicArgsErrorRetriesTheTick(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var mu sync.Mutex
	calls := 0
	p := worker.NewPeriodicJob("flaky", worker.Every(time.Second), func(_ context.Context, t worker.Tick) (tickArgs, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return tickArgs{}, errors.New("not yet")
		}
		return tickArgs{Schedule: t.Name, At: t.At, Missed: t.Missed}, nil
	}, nil)
	w := periodicWorker(t, pool, "a", p)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "two jobs", func() bool { return len(tickJobs(t, pool, "flaky")) >= 2 })
	require.NoError(t, stopWorker(t, w, 5*time.Second))
	got := tickJobs(t, pool, "flaky")
	require.GreaterOrEqual(t, w.Stats().PeriodicErrors, int64(1))
	for i := 1; i < len(got); i++ {
		require.Equal(t, time.Second, got[i].Args.At.Sub(got[i-1].Args.At)+time.Duration(got[i].Args.Missed)*time.Second,
			"every tick is covered once")
	}
}

// A schedule's row deleted while workers still list it is written again, from its next tick.
func TestPeriodicRowDeletedIsRegisteredAgain(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w := periodicWorker(t, pool, "a", tickJob("gone", worker.Every(time.Second), nil))
	startWorker(t, w)
	_, err := pool.Exec(context.Background(), "DELETE FROM tenure.periodic WHERE name = 'gone'")
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the row back", func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM tenure.periodic WHERE name = 'gone'").Scan(&n))
		return n == 1
	})
	n := len(tickJobs(t, pool, "gone"))
	waitFor(t, 10*time.Second, "ticks again", func() bool { return len(tickJobs(t, pool, "gone")) >= n+2 })
}

// TestPeriodicCountsOnlyCommittedEnqueues: Stats.PeriodicEnqueued counts the tick jobs whose
// transaction committed. A tick transaction that fails at COMMIT (here a deferred trigger
// refuses it; in life, Stop cancelling the service while it commits) inserted nothing and must
// not be counted: the counter was once bumped inside the transaction, and a loaded CI run of
// TestPeriodicOneJobPerTickAcrossWorkers counted 7 enqueues for 6 jobs.
func TestPeriodicCountsOnlyCommittedEnqueues(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w := periodicWorker(t, pool, "periodic-refused", tickJob("refused", worker.Every(time.Second), nil))
	startWorker(t, w)
	_, err := pool.Exec(ctx, `
CREATE FUNCTION public.refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON tenure.periodic DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.name = 'refused') EXECUTE FUNCTION public.refuse_at_commit()`)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "a tick refused at commit", func() bool { return w.Stats().PeriodicErrors > 0 })
	require.NoError(t, stopWorker(t, w, 10*time.Second))
	st := w.Stats()
	got := tickJobs(t, pool, "refused")
	require.Equal(t, int64(len(got)), st.PeriodicEnqueued, "counted enqueues = jobs in the table (%d errors)", st.PeriodicErrors)
}

// heldConn is a connection whose reads wait while its hold is shut (closed releases it): the
// server has answered, the client has not read the answer yet.
type heldConn struct {
	net.Conn
	hold atomic.Pointer[chan struct{}]
}

func (c *heldConn) Read(b []byte) (int, error) {
	if h := c.hold.Load(); h != nil {
		<-*h
	}
	return c.Conn.Read(b)
}

// TestPeriodicStopDuringTickCommit: a Stop that begins while a tick's COMMIT is answered but
// not yet read must not lose count of the job it enqueued. The engine pool's connections hold
// their reads once a tick's transaction sends COMMIT; the test waits until the job is visible
// (the server committed), begins Stop, and then lets the answer through. A worker that
// cancelled the COMMIT with Stop saw an error for a transaction that committed, and counted
// nothing: CI caught it as "jobs in the table = enqueues the workers counted" (7 against 6) in
// TestPeriodicOneJobPerTickAcrossWorkers.
func TestPeriodicStopDuringTickCommit(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	var (
		mu    sync.Mutex
		conns = map[*pgx.Conn]*heldConn{}
		armed = map[*pgx.Conn]bool{} // sent PeriodicSetJob in the open transaction
		hold  = make(chan struct{})
		held  atomic.Bool
	)
	tr := &stmtTracer{onQuery: func(conn *pgx.Conn, sql string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.Contains(sql, "name: PeriodicSetJob"):
			armed[conn] = true
		case sql == "commit" && armed[conn] && held.CompareAndSwap(false, true):
			conns[conn].hold.Store(&hold)
		}
	}}
	cfg := pool.Config().Copy()
	cfg.ConnConfig.Tracer = tr
	var dialed sync.Map // net.Conn's address → *heldConn, until AfterConnect names its pgx.Conn
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h := &heldConn{Conn: c}
		dialed.Store(c.LocalAddr().String(), h)
		return h, nil
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		h, _ := dialed.Load(c.PgConn().Conn().LocalAddr().String())
		mu.Lock()
		conns[c] = h.(*heldConn)
		mu.Unlock()
		return nil
	}
	eng, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(eng.Close)
	wcfg := fastConfig(nil)
	wcfg.ID = "periodic-stop"
	wcfg.EnginePool = eng
	wcfg.Periodic = []worker.PeriodicJob{tickJob("every-second", worker.Every(time.Second), nil)}
	w, err := worker.New(ownPool(t, pool), wcfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(context.Context, *generics.Job[tickArgs]) error { return nil }, nil)
	startWorker(t, w)

	waitFor(t, time.Minute, "a tick's job committed, its COMMIT's answer held",
		func() bool { return held.Load() && len(tickJobs(t, pool, "every-second")) > 0 })
	stopped := make(chan error, 1)
	go func() { stopped <- stopWorker(t, w, 30*time.Second) }()
	time.Sleep(300 * time.Millisecond) // Stop has begun: its context is cancelled
	close(hold)
	require.NoError(t, <-stopped)
	got := tickJobs(t, pool, "every-second")
	require.NotEmpty(t, got)
	require.Equal(t, int64(len(got)), w.Stats().PeriodicEnqueued, "jobs in the table = enqueues the worker counted")
	require.Zero(t, w.Stats().PeriodicErrors)
}

package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func captureLogger() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

// Ctrl-C: cancelling Start's context (signal.NotifyContext) begins a graceful stop. A running
// handler is not cancelled and its job succeeds; nothing new is claimed; a later Stop waits
// for the stop and returns its result.
func TestCancelStartContextStopsGracefully(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 2}})
	log, logs := captureLogger()
	cfg.Logger = log
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started := make(chan int64, 4)
	release := make(chan struct{})
	causes := make(chan error, 4)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		started <- job.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
	}, nil)
	c := newClient(t, pool, w)
	first, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)

	runCtx, interrupt := context.WithCancel(ctx) // what signal.NotifyContext returns
	require.NoError(t, w.Start(runCtx))
	<-started
	interrupt() // Ctrl-C
	// The graceful stop begins on its own goroutine: wait until it has (a job inserted before
	// that may rightly be claimed first).
	waitFor(t, 30*time.Second, "the graceful stop", func() bool { return strings.Contains(logs.String(), "stopping: no new claims") })

	// The stop has begun: a job enqueued now is not claimed, the running handler keeps going.
	second, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond) // a window in which a wrong claim or cancellation would show
	select {
	case cause := <-causes:
		t.Fatalf("cancelling Start's context cancelled the running handler (cause %v): a hard stop", cause)
	case id := <-started:
		t.Fatalf("job %d was claimed after Start's context was cancelled", id)
	default:
	}
	close(release)

	require.NoError(t, stopWorker(t, w, 10*time.Second))
	got, err := c.Get(ctx, first.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateSucceeded, got.State)
	got, err = c.Get(ctx, second.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
	require.Zero(t, got.Attempt)
	require.Contains(t, logs.String(), "context cancelled: graceful stop")
}

// A Stop with an earlier deadline than the graceful stop Start's context began tightens it:
// handlers are cancelled HardStopGrace before the Stop's deadline, their jobs released, and
// Stop returns by its deadline.
func TestStopTightensTheStopStartsContextBegan(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(nil)
	cfg.ShutdownTimeout = time.Hour
	cfg.HardStopGrace = 2 * time.Second // the reserve the release gets: room on a loaded machine
	log, logs := captureLogger()
	cfg.Logger = log
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started := make(chan struct{})
	cause := make(chan error, 1)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, nil)
	c := newClient(t, pool, w)
	row, err := c.Insert(ctx, slowArgs{}, nil)
	require.NoError(t, err)
	runCtx, interrupt := context.WithCancel(ctx)
	require.NoError(t, w.Start(runCtx))
	<-started
	interrupt()
	// The graceful stop (an hour's deadline) has begun once the engine says it stops.
	waitFor(t, 30*time.Second, "the graceful stop", func() bool { return strings.Contains(logs.String(), "stopping: no new claims") })

	// The Stop's 4 s deadline, not the graceful stop's hour, bounds it. Asserted as a bound a
	// loaded machine cannot break by scheduling delay (the hour is what a missed tightening
	// costs); the handler's cause says the tightening happened.
	begin := time.Now()
	require.NoError(t, stopWorker(t, w, 4*time.Second))
	require.Less(t, time.Since(begin), time.Minute, "Stop waited for the graceful stop's hour")
	require.ErrorIs(t, <-cause, worker.ErrWorkerStopping)
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
	require.Zero(t, got.Attempt, "a stop is not the job's failure")
	require.Contains(t, logs.String(), "cancelling handlers")
	require.Contains(t, logs.String(), "stop deadline in")
}

// Start fails on a database it cannot use instead of starting loops that fail forever.
func TestStartRefusesUnusableDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *worker.Worker) {
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	}
	open := func(url string) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}

	// Unreachable.
	w, err := worker.New(open("postgres://nobody@127.0.0.1:1/x?connect_timeout=2"), fastConfig(nil))
	require.NoError(t, err)
	register(w)
	err = w.Start(ctx)
	require.ErrorContains(t, err, "database unreachable")

	// Never migrated.
	empty := open(pgtest.NewEmptyDB(t))
	w, err = worker.New(empty, fastConfig(nil))
	require.NoError(t, err)
	register(w)
	err = w.Start(ctx)
	require.ErrorIs(t, err, worker.ErrSchemaBehind)
	require.ErrorContains(t, err, "tenure migrate up")
	require.ErrorContains(t, err, "migrations.Up")
	// Start may be retried once the schema is there.
	_, err = migrations.Up(ctx, empty)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	require.NoError(t, stopWorker(t, w, 5*time.Second))

	// Behind by one migration.
	if migrations.Latest() > 1 {
		_, err = migrations.Down(ctx, empty, 1)
		require.NoError(t, err)
		w, err = worker.New(empty, fastConfig(nil))
		require.NoError(t, err)
		register(w)
		require.ErrorIs(t, w.Start(ctx), worker.ErrSchemaBehind)
	}

	// Migrated by a newer release.
	pool := pgtest.NewPool(t)
	_, err = pool.Exec(ctx, "INSERT INTO tenure.schema_migrations (version, name) VALUES ($1, 'future')", migrations.Latest()+1)
	require.NoError(t, err)
	w, err = worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	register(w)
	err = w.Start(ctx)
	require.ErrorIs(t, err, worker.ErrSchemaAhead)
	require.ErrorIs(t, err, migrations.ErrSchemaTooNew, "one sentinel per idea")
	require.NotErrorIs(t, err, worker.ErrSchemaBehind)
}

// A claim that fails on every attempt is logged at most once per interval, with a count, and
// is visible in Stats.
func TestRepeatedClaimErrorsAreThrottled(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	cfg := fastConfig(nil)
	log, logs := captureLogger()
	cfg.Logger = log
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	clk := worker.UseFakeClock(w, time.Now()) // the log throttle's interval passes only when the test says
	startWorker(t, w)
	// Every claim and sweep now fails (the table is gone under its name).
	_, err = pool.Exec(ctx, "ALTER TABLE tenure.jobs RENAME TO jobs_elsewhere")
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "ten failed claims", func() bool { return w.Stats().ClaimErrors >= 10 })
	st := w.Stats()
	require.Contains(t, st.LastError, "jobs")
	require.Equal(t, clk.Now(), st.LastErrorAt, "the failure's time, on the engine's clock")
	// The engine's clock has not moved: one line, however long the ten claims took.
	require.Equal(t, 1, strings.Count(logs.String(), "claim failed"), "claim failures must be rate-limited in the log:\n%s", logs.String())
	// Once the throttle's interval has passed, the next failure is logged with the count of
	// those held back.
	clk.Advance(time.Minute)
	waitFor(t, 30*time.Second, "the second line", func() bool { return strings.Count(logs.String(), "claim failed") == 2 })
	require.Regexp(t, `claim failed[^\n]*not_logged_since_last=[1-9]`, logs.String())
}

// Start warns about a registered kind whose queue the worker does not serve.
func TestStartWarnsAboutUnservedQueue(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	cfg := fastConfig(map[string]worker.QueueConfig{"default": {}})
	log, logs := captureLogger()
	cfg.Logger = log
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error { return nil }, nil)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[slowArgs]) error { return nil },
		&worker.HandlerOptions{Queue: "mail"})
	startWorker(t, w)
	out := logs.String()
	require.Contains(t, out, "not served by this worker")
	require.Contains(t, out, "kind=slow queue=mail")
	require.NotContains(t, out, "kind=noop")
}

// TestFinishLingerBatchesLowLoad: eight jobs whose handlers return 10 ms apart. With a
// FinishLinger longer than their spread, their completions are written by one statement,
// with one finisher and with two (one batch lingers, whichever finisher writes it: two
// lingering finishers used to split the jobs between them); with FinishLinger disabled each is
// written as it comes: the test releases the next handler only once the previous job's finish
// is written, so each is a statement of its own. A lone finish is written within the linger.
// The linger (1 s, the most the config allows) is far longer than the release spread (~70 ms), so a loaded machine's
// scheduling delays cannot split the batch.
func TestFinishLingerBatchesLowLoad(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, linger time.Duration, finishers int) (statements uint64) {
		pool := pgtest.NewPool(t)
		ctx := context.Background()
		cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 8}})
		cfg.FinishLinger, cfg.Finishers = linger, finishers
		w, err := worker.New(pool, cfg)
		require.NoError(t, err)
		// The finishers' batching is what is measured: no completion rides on a claim
		// (claim.go, "Completions ride on claims"; TestCompletionsRideOnClaims covers those).
		worker.NoRide(w)
		release := make([]chan struct{}, 9)
		for i := range release {
			release[i] = make(chan struct{})
		}
		var running atomic.Int64
		worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
			running.Add(1)
			<-release[job.Args.N]
			return nil
		}, nil)
		c := newClient(t, pool, w)
		ps := make([]jobs.InsertManyParams, 8)
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: noopArgs{N: i}}
		}
		_, err = c.InsertMany(ctx, ps)
		require.NoError(t, err)
		startWorker(t, w)
		waitFor(t, 30*time.Second, "8 handlers running", func() bool { return running.Load() == 8 })
		for i := 0; i < 8; i++ {
			close(release[i])
			if linger < 0 { // each finish written before the next handler returns
				waitFor(t, 30*time.Second, "the finish", func() bool { return w.Stats().Succeeded == int64(i+1) })
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		}
		waitFor(t, 30*time.Second, "8 successes", func() bool { return w.Stats().Succeeded == 8 })
		statements = w.Stats().FinishLatency.Count
		// A lone job: written within the linger (plus the write itself, generously).
		close(release[8])
		_, err = c.Insert(ctx, noopArgs{N: 8}, nil)
		require.NoError(t, err)
		waitFor(t, linger+30*time.Second, "the lone finish", func() bool { return w.Stats().Succeeded == 9 })
		return statements
	}
	var lingered, lingered2, immediate uint64
	t.Run("linger", func(t *testing.T) { lingered = run(t, time.Second, 1) })
	t.Run("linger-2-finishers", func(t *testing.T) { lingered2 = run(t, time.Second, 2) })
	t.Run("off", func(t *testing.T) { immediate = run(t, -1, 1) })
	t.Logf("finish statements for 8 staggered jobs: %d with a 1 s linger (%d with two finishers), %d without", lingered, lingered2, immediate)
	require.Equal(t, uint64(1), lingered)
	require.Equal(t, uint64(1), lingered2)
	require.Equal(t, uint64(8), immediate)
}

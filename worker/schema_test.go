package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/db/migrations"
	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/dbschema"
	"github.com/tenureq/tenure/internal/locks"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

// schemaArgs carries the schema its job was inserted into, so a handler can tell a job of
// another schema.
type schemaArgs struct {
	Schema string `json:"schema"`
	N      int    `json:"n"`
	Block  bool   `json:"block,omitempty"`
	Fail   bool   `json:"fail,omitempty"`
}

func (schemaArgs) Kind() string        { return "schema_probe" }
func (schemaArgs) PayloadVersion() int { return 1 }

// schemaSide is one schema's worker, client and what its handler saw.
type schemaSide struct {
	name    string
	w       *worker.Worker
	c       *jobs.Client
	mu      sync.Mutex
	ran     map[int64]string // job id -> the schema its args named
	started chan int64       // ids of blocking jobs whose handler began
	ticks   int              // periodic jobs run (N == -1)
}

func newSchemaSide(t *testing.T, pool *pgxpool.Pool, schema string, cfg *worker.Config) *schemaSide {
	t.Helper()
	cfg.Schema = schema
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	require.Equal(t, schema, w.Schema())
	s := &schemaSide{name: schema, w: w, ran: map[int64]string{}, started: make(chan int64, 16)}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[schemaArgs]) error {
		s.mu.Lock()
		s.ran[job.ID] = job.Args.Schema
		if job.Args.N == -1 {
			s.ticks++
		}
		s.mu.Unlock()
		if job.Args.Block {
			s.started <- job.ID
			<-ctx.Done()
			return ctx.Err()
		}
		if job.Args.Fail {
			return errors.New("planned failure")
		}
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 2, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	s.c, err = jobs.NewClient(pool, &jobs.Config{Registry: w.Registry(), Schema: schema})
	require.NoError(t, err)
	require.Equal(t, schema, s.c.Schema())
	return s
}

func (s *schemaSide) foreign() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var bad []int64
	for id, sch := range s.ran {
		if sch != s.name {
			bad = append(bad, id)
		}
	}
	return bad
}

func stateOf(t *testing.T, c *jobs.Client, id int64) generics.JobState {
	t.Helper()
	r, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return r.State
}

// TestTwoSchemasShareNothing runs a client and a worker per schema (tenure and app2) in one
// database, with the same queue and kind names and colliding job ids: every job runs in its own
// schema, a NOTIFY of one schema wakes nobody of the other, a cancel of app2's job N leaves
// tenure's job N running, a pause of app2's queue leaves tenure's queue working, and the
// advisory locks of one schema do not exclude the other's.
func TestTwoSchemasShareNothing(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t) // schema tenure migrated
	app2Runner, err := migrations.NewRunner(migrations.Options{Schema: "app2"})
	require.NoError(t, err)
	_, err = app2Runner.Up(ctx, pool)
	require.NoError(t, err)

	// Channels: a listener on each schema's channel hears its own schema's inserts only.
	listen := func(channel string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, pool.Config().ConnConfig.ConnString())
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		_, err = conn.Exec(ctx, "LISTEN "+channel)
		require.NoError(t, err)
		return conn
	}
	tenureL, app2L := listen("tenure_jobs"), listen("app2_jobs")

	// Slow polling: a job that runs at once was woken by its own schema's NOTIFY.
	cfg := func() *worker.Config {
		c := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}})
		c.FetchPollMin, c.FetchPollMax = 30*time.Second, 30*time.Second
		return c
	}
	def, app2 := newSchemaSide(t, pool, "tenure", cfg()), newSchemaSide(t, pool, "app2", cfg())

	r, err := app2.c.Insert(ctx, schemaArgs{Schema: "app2"}, nil)
	require.NoError(t, err)
	n, err := app2L.WaitForNotification(ctxTimeout(t, 5*time.Second))
	require.NoError(t, err)
	require.Equal(t, "app2_jobs", n.Channel)
	_, err = tenureL.WaitForNotification(ctxTimeout(t, 300*time.Millisecond))
	require.Error(t, err, "an insert into app2 notified tenure's channel")
	require.Equal(t, int64(1), r.Job.ID)

	startWorker(t, def.w)
	startWorker(t, app2.w)
	waitFor(t, 10*time.Second, "app2's first job", func() bool { return stateOf(t, app2.c, r.Job.ID) == generics.JobStateSucceeded })

	// Both schemas: jobs of each, the same kind and queue, ids colliding.
	for i := range 20 {
		_, err := def.c.Insert(ctx, schemaArgs{Schema: "tenure", N: i}, nil)
		require.NoError(t, err)
		_, err = app2.c.Insert(ctx, schemaArgs{Schema: "app2", N: i}, nil)
		require.NoError(t, err)
	}
	waitFor(t, 20*time.Second, "every job of both schemas", func() bool {
		def.mu.Lock()
		a := len(def.ran)
		def.mu.Unlock()
		app2.mu.Lock()
		b := len(app2.ran)
		app2.mu.Unlock()
		return a == 20 && b == 21
	})
	require.Empty(t, def.foreign(), "tenure's worker ran jobs of app2")
	require.Empty(t, app2.foreign(), "app2's worker ran jobs of tenure")

	// Cancel: both schemas run a blocking job; cancelling app2's leaves tenure's running, even
	// where the ids are equal.
	dr, err := def.c.Insert(ctx, schemaArgs{Schema: "tenure", Block: true}, nil)
	require.NoError(t, err)
	ar, err := app2.c.Insert(ctx, schemaArgs{Schema: "app2", Block: true}, nil)
	require.NoError(t, err)
	require.Equal(t, dr.Job.ID+1, ar.Job.ID, "ids: tenure has 20, app2 21 jobs before these")
	require.Equal(t, dr.Job.ID, <-def.started)
	require.Equal(t, ar.Job.ID, <-app2.started)
	// Job dr.Job.ID exists in app2 too (succeeded); the request names app2's job ar.Job.ID only.
	out, err := app2.c.Cancel(ctx, ar.Job.ID, jobs.Action{Actor: "test", Reason: "schema isolation"})
	require.NoError(t, err)
	require.Equal(t, jobs.CancelRequested, out)
	waitFor(t, 10*time.Second, "app2's job cancelled", func() bool { return stateOf(t, app2.c, ar.Job.ID) == generics.JobStateCancelled })
	require.Equal(t, generics.JobStateRunning, stateOf(t, def.c, dr.Job.ID), "tenure's job was cancelled by app2's request")
	_, err = def.c.Cancel(ctx, dr.Job.ID, jobs.Action{Actor: "test", Reason: "done"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "tenure's job cancelled", func() bool { return stateOf(t, def.c, dr.Job.ID) == generics.JobStateCancelled })

	// Pause: app2's queue default paused; tenure's default keeps working.
	_, err = app2.c.PauseQueue(ctx, "default", jobs.Action{Actor: "test", Reason: "schema isolation"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "app2's worker sees the pause", func() bool { return len(app2.w.Stats().PausedQueues) == 1 })
	require.Empty(t, def.w.Stats().PausedQueues, "app2's pause reached tenure's worker")
	pr, err := app2.c.Insert(ctx, schemaArgs{Schema: "app2", N: 100}, nil)
	require.NoError(t, err)
	tr, err := def.c.Insert(ctx, schemaArgs{Schema: "tenure", N: 100}, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "tenure's job runs while app2 is paused", func() bool { return stateOf(t, def.c, tr.Job.ID) == generics.JobStateSucceeded })
	require.Equal(t, generics.JobStateReady, stateOf(t, app2.c, pr.Job.ID), "app2's paused queue ran a job")
	_, err = app2.c.ResumeQueue(ctx, "default", jobs.Action{Actor: "test", Reason: "done"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "app2's job after resume", func() bool { return stateOf(t, app2.c, pr.Job.ID) == generics.JobStateSucceeded })

	// Locks: while a session holds app2's prune lock, tenure's pruner is not skipped (and the
	// other way round); app2's own pruner is.
	holder, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", dbschema.Must("app2").Key(locks.Prune))
	require.NoError(t, err)
	res, err := def.c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.False(t, res.Skipped, "app2's prune lock excluded tenure's pruner")
	require.Positive(t, res.Finished)
	res, err = app2.c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Skipped, "app2's pruner ran while its lock was held")
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)
	require.Empty(t, def.foreign())
	require.Empty(t, app2.foreign())
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestOnlyAnotherSchemaWorks runs every path in a database where Tenure lives in schema alt
// and schema tenure does not exist: insert, work, finish, retry to dead, cancel, prune, unique
// insert, a periodic job, and alt.enqueue from SQL.
func TestOnlyAnotherSchemaWorks(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	runner, err := migrations.NewRunner(migrations.Options{Schema: "alt"})
	require.NoError(t, err)
	_, err = runner.Up(ctx, pool)
	require.NoError(t, err)

	cfg := fastConfig(map[string]worker.QueueConfig{"default": {Concurrency: 4}})
	cfg.Periodic = []worker.PeriodicJob{worker.NewPeriodicJob("alt-tick", worker.Every(time.Second),
		func(context.Context, worker.Tick) (schemaArgs, error) { return schemaArgs{Schema: "alt", N: -1}, nil }, nil)}
	alt := newSchemaSide(t, pool, "alt", cfg)
	startWorker(t, alt.w)

	ok, err := alt.c.Insert(ctx, schemaArgs{Schema: "alt", N: 1}, nil)
	require.NoError(t, err)
	failing, err := alt.c.Insert(ctx, schemaArgs{Schema: "alt", N: 2, Fail: true}, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "success and retries to dead", func() bool {
		return stateOf(t, alt.c, ok.Job.ID) == generics.JobStateSucceeded && stateOf(t, alt.c, failing.Job.ID) == generics.JobStateDead
	})
	dead, err := alt.c.Get(ctx, failing.Job.ID)
	require.NoError(t, err)
	require.Len(t, dead.Errors, 2, "one retry, then dead")

	// Operator retry of the dead job (it fails again: dead after its new attempts).
	_, err = alt.c.Retry(ctx, failing.Job.ID, jobs.Action{Actor: "test", Reason: "again"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "retried job dead again", func() bool {
		r, err := alt.c.Get(ctx, failing.Job.ID)
		require.NoError(t, err)
		return r.State == generics.JobStateDead && len(r.Errors) > 2
	})

	// Cancel a running job (NOTIFY alt_cancel, or the heartbeat).
	blocking, err := alt.c.Insert(ctx, schemaArgs{Schema: "alt", Block: true}, nil)
	require.NoError(t, err)
	require.Equal(t, blocking.Job.ID, <-alt.started)
	_, err = alt.c.Cancel(ctx, blocking.Job.ID, jobs.Action{Actor: "test", Reason: "cancel"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "cancelled", func() bool { return stateOf(t, alt.c, blocking.Job.ID) == generics.JobStateCancelled })

	// Unique insert.
	u := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}, Delay: time.Hour}
	first, err := alt.c.Insert(ctx, schemaArgs{Schema: "alt", N: 7}, u)
	require.NoError(t, err)
	again, err := alt.c.Insert(ctx, schemaArgs{Schema: "alt", N: 7}, u)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.Job.ID, again.Job.ID)

	// SQL enqueue.
	var sqlID int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM alt.enqueue('schema_probe', '{"schema":"alt","n":9}'::jsonb)`).Scan(&sqlID))
	waitFor(t, 10*time.Second, "the SQL-enqueued job", func() bool { return stateOf(t, alt.c, sqlID) == generics.JobStateSucceeded })

	// Periodic.
	waitFor(t, 10*time.Second, "a periodic job", func() bool {
		alt.mu.Lock()
		defer alt.mu.Unlock()
		return alt.ticks > 0
	})
	periodic, err := alt.c.Periodic(ctx)
	require.NoError(t, err)
	require.Len(t, periodic, 1)

	// Prune every finished job.
	res, err := alt.c.PruneExpired(ctx, jobs.PruneParams{FinishedBefore: time.Now().Add(time.Hour), DeadBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.Positive(t, res.Finished)
	_, err = alt.c.Get(ctx, ok.Job.ID)
	require.ErrorIs(t, err, jobs.ErrNotFound)

	require.Empty(t, alt.foreign())
	var tenureSchemas int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'tenure'`).Scan(&tenureSchemas))
	require.Zero(t, tenureSchemas)
	require.NoError(t, stopWorker(t, alt.w, 10*time.Second))
	st := alt.w.Stats()
	require.Zero(t, st.StaleRejected)
}

// TestInvalidSchemaRefusedByClientAndWorker: New refuses a bad schema name with the typed error.
func TestInvalidSchemaRefusedByClientAndWorker(t *testing.T) {
	pool := pgtest.NewPool(t)
	for _, bad := range []string{"Tenure", "1x", "a-b", "public", "select", "pg_x"} {
		_, err := worker.New(pool, &worker.Config{Schema: bad})
		require.ErrorIs(t, err, worker.ErrInvalidConfig, bad)
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, bad)
		var ie *migrations.InvalidSchemaError
		require.True(t, errors.As(err, &ie), bad)
		require.Equal(t, bad, ie.Name)
		_, err = jobs.NewClient(pool, &jobs.Config{Schema: bad})
		require.ErrorIs(t, err, migrations.ErrInvalidSchema, bad)
	}
	// A schema that is valid but not migrated fails Start with the one hint.
	w, err := worker.New(pool, &worker.Config{Schema: "never_migrated"})
	require.NoError(t, err)
	require.ErrorIs(t, w.Start(context.Background()), worker.ErrSchemaBehind)
}

// TestBatchedClaimInAnotherSchema: a worker serving several queues claims them through the
// claim batcher (claimbatch.go), whose pipelined statement must be rewritten for the worker's
// schema like every other; in a database without schema tenure every job still runs once.
func TestBatchedClaimInAnotherSchema(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewEmptyDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	runner, err := migrations.NewRunner(migrations.Options{Schema: "alt_many"})
	require.NoError(t, err)
	_, err = runner.Up(ctx, pool)
	require.NoError(t, err)

	queues := map[string]worker.QueueConfig{}
	for i := range 4 {
		queues[fmt.Sprintf("q%d", i)] = worker.QueueConfig{Concurrency: 2}
	}
	side := newSchemaSide(t, pool, "alt_many", fastConfig(queues))
	startWorker(t, side.w)
	var params []jobs.InsertManyParams
	for i := range 40 {
		params = append(params, jobs.InsertManyParams{Args: schemaArgs{Schema: "alt_many", N: i + 1},
			Opts: &jobs.InsertOpts{Queue: fmt.Sprintf("q%d", i%4)}})
	}
	res, err := side.c.InsertMany(ctx, params)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "every job of every queue succeeded", func() bool {
		for _, r := range res {
			if stateOf(t, side.c, r.Job.ID) != generics.JobStateSucceeded {
				return false
			}
		}
		return true
	})
	stmts, _ := worker.ClaimBatchStats(side.w)
	require.Positive(t, stmts, "the queues were not claimed through the batcher")
	require.Empty(t, side.foreign())
}

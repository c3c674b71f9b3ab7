package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type outcomes struct {
	mu  sync.Mutex
	all []worker.Outcome
}

func (o *outcomes) add(x worker.Outcome) { o.mu.Lock(); o.all = append(o.all, x); o.mu.Unlock() }
func (o *outcomes) list() []worker.Outcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]worker.Outcome(nil), o.all...)
}

// A job that snoozes three times and then succeeds does so with a budget of one attempt: a
// snooze is not an attempt. Each snooze is a fresh claim (generation+1) and is counted.
func TestSnoozeDoesNotConsumeAttempts(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var rec outcomes
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.add
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []int
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		seen = append(seen, job.Snoozes)
		mu.Unlock()
		require.Equal(t, 1, job.Attempt)
		if job.Snoozes < 3 {
			return worker.Snooze(20 * time.Millisecond)
		}
		return nil
	}, &worker.HandlerOptions{MaxAttempts: 1})
	c := newClient(t, pool, w)
	ctx := context.Background()
	row, err := c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "job succeeded", func() bool { return countState(t, pool, "succeeded") == 1 })
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, 3, got.Snoozes)
	require.EqualValues(t, 4, got.Generation)
	require.Empty(t, got.Errors)
	mu.Lock()
	require.Equal(t, []int{0, 1, 2, 3}, seen)
	mu.Unlock()
	require.NoError(t, stopWorker(t, w, 5*time.Second))
	require.EqualValues(t, 3, w.Stats().Snoozed)
	var snoozes int
	for _, o := range rec.list() {
		if o.Transition == "snoozed" {
			require.NoError(t, o.Err)
			require.Equal(t, 20*time.Millisecond, o.Delay)
			snoozes++
		}
	}
	require.Equal(t, 3, snoozes)
}

// A job cannot snooze forever: past MaxSnoozes a snooze fails the attempt (SNOOZE_LIMIT)
// like an error, consuming the retry budget until the job is dead.
func TestSnoozeLimitFailsAsAnError(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var runs atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		runs.Add(1)
		return worker.Snooze(time.Millisecond)
	}, &worker.HandlerOptions{MaxAttempts: 3, MaxSnoozes: 2, Retry: worker.FullJitter{Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	c := newClient(t, pool, w)
	ctx := context.Background()
	row, err := c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "job dead", func() bool { return countState(t, pool, "dead") == 1 })
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, "SNOOZE_LIMIT", got.LastErrorCode)
	require.Equal(t, 2, got.Snoozes)
	require.Equal(t, 3, got.Attempt)
	require.Len(t, got.Errors, 3)
	require.EqualValues(t, 2+3, runs.Load()) // two snoozes, then three failed attempts
	require.Contains(t, got.Errors[0].Message, "snoozed 2 times")
}

// The snooze is a fenced write: an attempt that lost the job (another owner's token) snoozes
// nothing, is reported stale, and the row is left as the new owner has it.
func TestSnoozeIsFenced(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	var rec outcomes
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.add
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	started, release := make(chan int64, 1), make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		started <- job.ID
		<-release
		return worker.Snooze(time.Minute)
	}, nil)
	c := newClient(t, pool, w)
	ctx := context.Background()
	row, err := c.Insert(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	<-started
	// another owner takes the job over (as after a lease expiry and re-claim)
	_, err = pool.Exec(ctx, "UPDATE tenure.jobs SET claim_token = gen_random_uuid(), generation = generation + 1, locked_by = 'usurper' WHERE id = $1", row.Job.ID)
	require.NoError(t, err)
	close(release)
	waitFor(t, 10*time.Second, "the snooze's outcome", func() bool { return len(rec.list()) == 1 })
	o := rec.list()[0]
	require.Equal(t, "snoozed", o.Transition)
	var stale *worker.StaleWriteError
	require.True(t, errors.As(o.Err, &stale), "%v", o.Err)
	got, err := c.Get(ctx, row.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateRunning, got.State)
	require.Equal(t, "usurper", got.LockedBy)
	require.Equal(t, 0, got.Snoozes)
	require.EqualValues(t, 1, w.Stats().StaleRejected)
	_, err = pool.Exec(ctx, "UPDATE tenure.jobs SET state = 'cancelled', finished_at = now(), locked_by = NULL, locked_until = NULL WHERE id = $1", row.Job.ID)
	require.NoError(t, err)
}

type reportArgs struct {
	Fail bool `json:"fail"`
}

func (reportArgs) Kind() string        { return "report" }
func (reportArgs) PayloadVersion() int { return 1 }

// Handler output is kept with the success that wrote it (batched completion and CompleteTx),
// never from an attempt that failed; bad output is refused at SetOutput, typed.
func TestHandlerOutputKeptWithSuccess(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[reportArgs]) error {
		require.NoError(t, worker.SetOutput(ctx, map[string]any{"attempt": job.Attempt, "rows": 42}))
		err := worker.SetOutput(ctx, strings.Repeat("x", worker.MaxOutputBytes))
		require.ErrorIs(t, err, worker.ErrInvalidOutput)
		require.ErrorIs(t, worker.SetOutput(ctx, func() {}), worker.ErrInvalidOutput)
		if job.Args.Fail && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		if job.Args.Fail {
			return worker.SetOutput(ctx, nil) // the successful attempt records none
		}
		return nil
	}, &worker.HandlerOptions{Retry: worker.FullJitter{Base: time.Millisecond, Cap: 2 * time.Millisecond}})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		if err := worker.SetOutput(ctx, []int{job.Args.N}); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return worker.CompleteTx(ctx, tx, job.JobRow) })
	}, nil)
	require.ErrorIs(t, worker.SetOutput(context.Background(), 1), worker.ErrNotInHandler)
	c := newClient(t, pool, w)
	ctx := context.Background()
	ok, err := c.Insert(ctx, reportArgs{}, nil)
	require.NoError(t, err)
	retried, err := c.Insert(ctx, reportArgs{Fail: true}, nil)
	require.NoError(t, err)
	tx, err := c.Insert(ctx, noopArgs{N: 5}, nil)
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "jobs succeeded", func() bool { return countState(t, pool, "succeeded") == 3 })
	got, err := c.Get(ctx, ok.Job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"attempt":1,"rows":42}`, string(got.Output))
	got, err = c.Get(ctx, retried.Job.ID)
	require.NoError(t, err)
	require.Nil(t, got.Output)
	require.Equal(t, 2, got.Attempt)
	got, err = c.Get(ctx, tx.Job.ID)
	require.NoError(t, err)
	require.JSONEq(t, `[5]`, string(got.Output))
}

// Tags travel from the insert to the handler and filter List.
func TestTagsReachHandlerAndFilterList(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var mu sync.Mutex
	got := map[int][]string{}
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		mu.Lock()
		got[job.Args.N] = job.Tags
		mu.Unlock()
		return nil
	}, nil)
	c := newClient(t, pool, w)
	ctx := context.Background()
	_, err = c.Insert(ctx, noopArgs{N: 1}, &jobs.InsertOpts{Tags: []string{"tenant:7", "import", "import"}})
	require.NoError(t, err)
	_, err = c.InsertMany(ctx, []jobs.InsertManyParams{
		{Args: noopArgs{N: 2}, Opts: &jobs.InsertOpts{Tags: []string{"tenant:8", "import"}}},
		{Args: noopArgs{N: 3}},
	})
	require.NoError(t, err)
	startWorker(t, w)
	waitFor(t, 10*time.Second, "jobs succeeded", func() bool { return countState(t, pool, "succeeded") == 3 })
	mu.Lock()
	require.Equal(t, []string{"tenant:7", "import"}, got[1])
	require.Equal(t, []string{"tenant:8", "import"}, got[2])
	require.Nil(t, got[3])
	mu.Unlock()
	page, err := c.List(ctx, jobs.ListParams{Tags: []string{"import"}})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	page, err = c.List(ctx, jobs.ListParams{Tags: []string{"import", "tenant:8"}, State: generics.JobStateSucceeded})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, []string{"tenant:8", "import"}, page.Jobs[0].Tags)
	_, err = c.List(ctx, jobs.ListParams{Tags: []string{"bad tag"}})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
	_, err = c.Insert(ctx, noopArgs{}, &jobs.InsertOpts{Tags: []string{"-starts-with-dash"}})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
}

// A unique job keeps its key while ready, running and waiting out a retry; it frees it when
// it succeeds (unless succeeded is one of its states).
func TestUniqueKeyThroughTheEngine(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	running, release := make(chan struct{}, 10), make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[reportArgs]) error {
		running <- struct{}{}
		<-release
		if job.Args.Fail && job.Attempt == 1 {
			return worker.RetryAfter(errors.New("again"), 300*time.Millisecond)
		}
		return nil
	}, nil)
	c := newClient(t, pool, w)
	ctx := context.Background()
	u := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}
	first, err := c.Insert(ctx, reportArgs{Fail: true}, u)
	require.NoError(t, err)
	startWorker(t, w)
	<-running
	dup, err := c.Insert(ctx, reportArgs{Fail: true}, u) // running holds the key
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, generics.JobStateRunning, dup.Job.State)
	release <- struct{}{}
	waitFor(t, 5*time.Second, "retry scheduled", func() bool {
		r, err := c.Get(ctx, first.Job.ID)
		require.NoError(t, err)
		return r.State == generics.JobStateReady && r.Attempt == 1
	})
	dup, err = c.Insert(ctx, reportArgs{Fail: true}, u) // ready (in backoff) holds the key
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	<-running
	close(release)
	waitFor(t, 5*time.Second, "succeeded", func() bool { return countState(t, pool, "succeeded") == 1 })
	again, err := c.Insert(ctx, reportArgs{Fail: true}, u) // succeeded frees it
	require.NoError(t, err)
	require.False(t, again.Duplicate)

	// with succeeded among the states, a success keeps the key
	keep := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true, States: []generics.JobState{generics.JobStateSucceeded}}}
	k, err := c.Insert(ctx, reportArgs{}, keep)
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "succeeded", func() bool { return countState(t, pool, "succeeded") == 3 })
	kd, err := c.Insert(ctx, reportArgs{}, keep)
	require.NoError(t, err)
	require.True(t, kd.Duplicate)
	require.Equal(t, k.Job.ID, kd.Job.ID)
	require.Equal(t, generics.JobStateSucceeded, kd.Job.State)
}

// tenure.enqueue from a trigger: a row inserted into an application table enqueues a job in
// the same transaction, the NOTIFY wakes an idle worker (its poll interval is far longer
// than the test waits), and the handler runs it. Bad input is refused with a clear error.
func TestSQLEnqueueFromTrigger(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
CREATE TABLE orders (id bigint PRIMARY KEY, email text NOT NULL);
CREATE FUNCTION orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM tenure.enqueue('noop', jsonb_build_object('n', NEW.id),
                           tags => ARRAY['order'], metadata => jsonb_build_object('email', NEW.email),
                           unique_args => '{}');
    RETURN NEW;
END $$;
CREATE TRIGGER orders_enqueue AFTER INSERT OR UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION orders_enqueue();`)
	require.NoError(t, err)

	cfg := fastConfig(nil)
	cfg.FetchPollMin, cfg.FetchPollMax = 30*time.Second, 30*time.Second
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	type ran struct {
		n     int
		email string
		tags  []string
	}
	runs := make(chan ran, 10)
	block := make(chan struct{})
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		runs <- ran{job.Args.N, job.Metadata["email"], job.Tags}
		<-block
		return nil
	}, nil)
	startWorker(t, w)
	// The worker's first claim found nothing; it now waits 30 s unless a NOTIFY wakes it.
	waitFor(t, 30*time.Second, "the first, empty claim", func() bool { return w.Stats().EmptyClaims >= 1 })

	_, err = pool.Exec(ctx, "INSERT INTO orders VALUES (41, 'a@b.c')")
	require.NoError(t, err)
	select {
	case r := <-runs:
		require.Equal(t, ran{41, "a@b.c", []string{"order"}}, r)
	case <-time.After(12 * time.Second): // before the 30 s poll's earliest wake (15 s, jittered): only the NOTIFY wakes the claim
		t.Fatal("the trigger's job did not run: no NOTIFY?")
	}
	// While it runs, the trigger firing again (an UPDATE) is a duplicate: one job.
	_, err = pool.Exec(ctx, "UPDATE orders SET email = 'x@y.z' WHERE id = 41")
	require.NoError(t, err)
	var id int64
	var dup bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT id, duplicate FROM tenure.enqueue('noop', '{\"n\":41}', unique_args => '{}')").Scan(&id, &dup))
	require.True(t, dup)
	close(block)
	waitFor(t, 5*time.Second, "succeeded", func() bool { return countState(t, pool, "succeeded") == 1 })
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 1, n)

	// The same options give the same key from Go and from SQL.
	c := newClient(t, pool, w)
	_, err = pool.Exec(ctx, "SELECT tenure.enqueue('noop', '{\"n\":99}', run_at => now() + interval '1 hour', unique_args => '{n}')")
	require.NoError(t, err)
	r, err := c.Insert(ctx, noopArgs{N: 99}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"n"}}})
	require.NoError(t, err)
	require.True(t, r.Duplicate)
	var payloadVersion int
	require.NoError(t, pool.QueryRow(ctx, "SELECT payload_version FROM tenure.jobs WHERE id = $1", r.Job.ID).Scan(&payloadVersion))
	require.Equal(t, 1, payloadVersion)

	// Refused input: clear errors, nothing written (the statement fails as a whole).
	for _, bad := range []string{
		`SELECT tenure.enqueue('noop', '[1,2]')`,
		`SELECT tenure.enqueue('noop', '{}', queue => 'no spaces allowed')`,
		`SELECT tenure.enqueue('noop', '{}', priority => 10)`,
		`SELECT tenure.enqueue('noop', jsonb_build_object('pad', repeat('x', 70000)))`,
		`SELECT tenure.enqueue('noop', '{}', tags => ARRAY['bad tag'])`,
		`SELECT tenure.enqueue('noop', '{}', metadata => '{"a":1}')`,
		`SELECT tenure.enqueue('', '{}')`,
	} {
		_, err := pool.Exec(ctx, bad)
		require.Error(t, err, bad)
	}
	_, err = pool.Exec(ctx, `SELECT tenure.enqueue('noop', '[1,2]')`)
	require.ErrorContains(t, err, "payload must be a JSON object")
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 2, n)
}

// A job enqueued from SQL whose payload the args type refuses (unknown field) is not retried
// forever: the handler's decode fails it permanently (INVALID_PAYLOAD).
func TestSQLEnqueuedPayloadStillDecoded(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	var ran atomic.Int64
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[noopArgs]) error {
		ran.Add(1)
		return nil
	}, nil)
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM tenure.enqueue('noop', '{"n": 1, "typo": true}')`).Scan(&id))
	startWorker(t, w)
	waitFor(t, 5*time.Second, "dead", func() bool { return countState(t, pool, "dead") == 1 })
	var code string
	var errs json.RawMessage
	require.NoError(t, pool.QueryRow(ctx, "SELECT last_error_code, errors FROM tenure.jobs WHERE id = $1", id).Scan(&code, &errs))
	require.Equal(t, "INVALID_PAYLOAD", code)
	require.EqualValues(t, 0, ran.Load())
}

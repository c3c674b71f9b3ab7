package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
	"github.com/tenureq/tenure/worker"
)

type seqArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
	// FailOnce: the first attempt fails (retryably); FailAlways: every attempt fails
	// permanently while the test's gate says so.
	FailOnce   bool `json:"fail_once,omitempty"`
	FailAlways bool `json:"fail_always,omitempty"`
}

func (seqArgs) Kind() string        { return "seq_step" }
func (seqArgs) PayloadVersion() int { return 1 }

// TestSequenceOneAtATimeInOrder: 3 keys x 12 jobs, inserted interleaved (some in concurrent
// transactions), run by two workers of 6 slots each. Per key, the handlers never overlap and
// start in insertion order, also when one job fails its first attempt (its retry holds the
// sequence); a sampler reads the table every 10 ms and never sees two running jobs of a key,
// nor a running job with an unfinished earlier job of its key.
func TestSequenceOneAtATimeInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	keys := []string{"k0", "k1", "k2"}
	const perKey = 12
	// Insert: k0 and k1 from two goroutines at once (their order within a key is the order in
	// which their transactions took the key: n increases within each goroutine), k2 in one
	// transaction of the caller's.
	var wg sync.WaitGroup
	for _, k := range keys[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < perKey; n++ {
				_, err := c.Insert(ctx, seqArgs{Key: k, N: n, FailOnce: n == 3}, &jobs.InsertOpts{Sequence: k})
				require.NoError(t, err)
			}
		}()
	}
	// kc: two goroutines insert into one key at once.
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < perKey/2; n++ {
				_, err := c.Insert(ctx, seqArgs{Key: "kc", N: g*100 + n}, &jobs.InsertOpts{Sequence: "kc"})
				require.NoError(t, err)
			}
		}()
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for n := 0; n < perKey; n++ {
		r, err := c.InsertTx(ctx, tx, seqArgs{Key: "k2", N: n}, &jobs.InsertOpts{Sequence: "k2"})
		require.NoError(t, err)
		want := generics.JobStateWaiting
		if n == 0 {
			want = generics.JobStateReady
		}
		require.Equal(t, want, r.Job.State)
		require.Equal(t, "k2", r.Job.SequenceKey)
	}
	require.NoError(t, tx.Commit(ctx))
	wg.Wait()

	var (
		mu      sync.Mutex
		running = map[string]int{}
		order   = map[string][]int{}
		overlap []string
	)
	handler := func(ctx context.Context, job *generics.Job[seqArgs]) error {
		mu.Lock()
		running[job.Args.Key]++
		if running[job.Args.Key] > 1 {
			overlap = append(overlap, fmt.Sprintf("%s/%d", job.Args.Key, job.Args.N))
		}
		order[job.Args.Key] = append(order[job.Args.Key], job.Args.N)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		running[job.Args.Key]--
		mu.Unlock()
		if job.Args.FailOnce && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	for i := 0; i < 2; i++ {
		w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 6}}))
		require.NoError(t, err)
		worker.MustRegister(w, handler, &worker.HandlerOptions{Retry: fastRetry})
		startWorker(t, w)
	}

	// The sampler: every 10 ms, from the table.
	var samples atomic.Int64
	stop := make(chan struct{})
	bad := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var key string
			err := pool.QueryRow(ctx, `SELECT r.sequence_key FROM tenure.jobs r
				WHERE r.state = 'running' AND r.sequence_key IS NOT NULL
				  AND (EXISTS (SELECT 1 FROM tenure.jobs o WHERE o.sequence_key = r.sequence_key AND o.state = 'running' AND o.id <> r.id)
				       OR EXISTS (SELECT 1 FROM tenure.jobs o WHERE o.sequence_key = r.sequence_key AND o.id < r.id AND o.state <> 'succeeded'))
				LIMIT 1`).Scan(&key)
			if err == nil {
				select {
				case bad <- key:
				default:
				}
			}
			samples.Add(1)
		}
	}()
	waitFor(t, 60*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == perKey*(len(keys)+1) })
	close(stop)
	<-done
	select {
	case k := <-bad:
		t.Fatalf("sequence %s had two running jobs, or one running ahead of an unfinished earlier job", k)
	default:
	}
	require.Positive(t, samples.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlap)
	for _, k := range keys {
		want := []int{}
		for n := 0; n < perKey; n++ {
			want = append(want, n)
			if k != "k2" && n == 3 {
				want = append(want, n) // its retry, before the next one
			}
		}
		require.Equal(t, want, order[k], k)
	}
	require.Len(t, order["kc"], perKey)
	// Every key ran in id order (the order in which the inserts took the key), kc included.
	var outOfOrder int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs a JOIN tenure.jobs b
		ON a.sequence_key = b.sequence_key AND b.id > a.id WHERE a.finished_at > b.attempted_at`).Scan(&outOfOrder))
	require.Zero(t, outOfOrder, "a job started before an earlier job of its sequence finished")
}

// TestSequenceDeadBlocksOrSkips: a job that ends dead holds its sequence under SequenceBlock
// (the next waits until an operator's retry makes it succeed) and lets the sequence move on
// under SequenceSkip.
func TestSequenceDeadBlocksOrSkips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	var failing atomic.Bool
	failing.Store(true)
	w, err := worker.New(pool, fastConfig(nil))
	require.NoError(t, err)
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[seqArgs]) error {
		if job.Args.FailAlways && failing.Load() {
			return worker.Permanent(errors.New("fails"))
		}
		return nil
	}, &worker.HandlerOptions{Retry: fastRetry})
	c := newClient(t, pool, w)
	ins := func(key string, n int, fail bool, pol jobs.SequenceOnFailure) int64 {
		r, err := c.Insert(ctx, seqArgs{Key: key, N: n, FailAlways: fail}, &jobs.InsertOpts{Sequence: key, SequenceOnFailure: pol})
		require.NoError(t, err)
		return r.Job.ID
	}
	b1, b2, b3 := ins("blk", 1, true, ""), ins("blk", 2, false, ""), ins("blk", 3, false, "")
	s1, s2 := ins("skp", 1, true, jobs.SequenceSkip), ins("skp", 2, false, jobs.SequenceSkip)
	startWorker(t, w)
	waitFor(t, 20*time.Second, "skp/2 succeeded", func() bool { return getJob(t, c, s2).State == generics.JobStateSucceeded })
	require.Equal(t, generics.JobStateDead, getJob(t, c, s1).State)
	require.Equal(t, generics.JobStateDead, getJob(t, c, b1).State)
	require.Equal(t, generics.JobStateWaiting, getJob(t, c, b2).State, "a dead job blocks its sequence")
	require.Equal(t, generics.JobStateWaiting, getJob(t, c, b3).State)
	// A job inserted behind a dead job of a blocked sequence waits too.
	b4 := ins("blk", 4, false, "")
	require.Equal(t, generics.JobStateWaiting, getJob(t, c, b4).State)
	// A job inserted behind a dead job of a skipping sequence does not.
	s3 := ins("skp", 3, false, jobs.SequenceSkip)
	waitFor(t, 20*time.Second, "skp/3 succeeded", func() bool { return getJob(t, c, s3).State == generics.JobStateSucceeded })

	failing.Store(false)
	_, err = c.Retry(ctx, b1, jobs.Action{Actor: "test", Reason: "fixed"})
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "blk drained", func() bool { return getJob(t, c, b4).State == generics.JobStateSucceeded })
	var ok bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT bool_and(a.attempted_at < b.attempted_at) FROM tenure.jobs a JOIN tenure.jobs b
		ON a.sequence_key = b.sequence_key AND b.id > a.id WHERE a.sequence_key = 'blk'`).Scan(&ok))
	require.True(t, ok, "blk ran in order")
	_, err = c.Retry(ctx, b2, jobs.Action{Actor: "test", Reason: "x"})
	require.ErrorIs(t, err, jobs.ErrAlreadyFinal)
}

// TestSequenceOpenInsertDoesNotHoldUpFinishes: a transaction that inserts into a sequence
// locks the key's last job until it ends. While it is open, that last job (waiting) is still
// released by the finish of the job before it, without the finish waiting for the open
// transaction (the lock does not conflict with the release), but it is not claimed; once the
// transaction commits, the sequence runs on in order, through the new job.
func TestSequenceOpenInsertDoesNotHoldUpFinishes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 8 })
	rec := &recorder{}
	cfg := fastConfig(nil)
	cfg.OnOutcome = rec.outcome
	w, err := worker.New(pool, cfg)
	require.NoError(t, err)
	var mu sync.Mutex
	var order []int
	worker.MustRegister(w, func(ctx context.Context, job *generics.Job[seqArgs]) error {
		mu.Lock()
		order = append(order, job.Args.N)
		mu.Unlock()
		return nil
	}, nil)
	c := newClient(t, pool, w)
	j1, err := c.Insert(ctx, seqArgs{Key: "k", N: 1}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	j2, err := c.Insert(ctx, seqArgs{Key: "k", N: 2}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	j3, err := c.InsertTx(ctx, tx, seqArgs{Key: "k", N: 3}, &jobs.InsertOpts{Sequence: "k"})
	require.NoError(t, err)
	require.Equal(t, generics.JobStateWaiting, j3.Job.State)

	startWorker(t, w)
	waitFor(t, 15*time.Second, "job 1's finish landed", func() bool { _, o := rec.snapshot(); return len(o) == 1 })
	_, outs := rec.snapshot()
	require.NoError(t, outs[0].Err)
	require.Equal(t, j1.Job.ID, outs[0].Job.ID)
	require.Equal(t, generics.JobStateReady, getJob(t, c, j2.Job.ID).State, "released while the insert is open")
	time.Sleep(300 * time.Millisecond) // polls come and go: job 2 is not claimed meanwhile
	require.Equal(t, generics.JobStateReady, getJob(t, c, j2.Job.ID).State, "not claimed while the insert is open")

	require.NoError(t, tx.Commit(ctx))
	waitFor(t, 15*time.Second, "job 3 succeeded", func() bool { return getJob(t, c, j3.Job.ID).State == generics.JobStateSucceeded })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, order)
}

// TestSequenceEveryInsertPath: the jobs of one key inserted through every path — Insert,
// InsertMany (several keys and plain jobs in one call), InsertManyTx (two calls in one
// transaction), tenure.enqueue from SQL — run one at a time in insertion order through real
// claims of two workers, also when a job fails its first attempt (its retry holds the
// sequence); a key filled through InsertMany alone and one through SQL alone as well. A
// sampler reads the table every 10 ms, as in TestSequenceOneAtATimeInOrder. InsertManyFast
// (COPY) refuses a sequenced job with *jobs.OptionError and writes nothing.
func TestSequenceEveryInsertPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 12 })
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	_, err = c.InsertManyFast(ctx, []jobs.InsertManyParams{{Args: seqArgs{Key: "x"}}, {Args: seqArgs{Key: "x"}, Opts: &jobs.InsertOpts{Sequence: "x"}}})
	var oe *jobs.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Sequence", oe.Field)
	require.Zero(t, countState(t, pool, "ready"), "a refused InsertManyFast writes nothing")

	want := map[string][]int{} // per key, the Ns in insertion order
	many := func(ps ...jobs.InsertManyParams) []jobs.InsertManyParams {
		for _, p := range ps {
			if p.Opts != nil && p.Opts.Sequence != "" {
				a := p.Args.(seqArgs)
				want[a.Key] = append(want[a.Key], a.N)
			}
		}
		return ps
	}
	seq := func(key string, n int, failOnce bool) jobs.InsertManyParams {
		return jobs.InsertManyParams{Args: seqArgs{Key: key, N: n, FailOnce: failOnce}, Opts: &jobs.InsertOpts{Sequence: key}}
	}
	sqlEnqueue := func(q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, key string, n int) {
		_, err := q.Exec(ctx, `SELECT tenure.enqueue('seq_step', jsonb_build_object('key', $1::text, 'n', $2::int), sequence => $1)`, key, n)
		require.NoError(t, err)
		want[key] = append(want[key], n)
	}
	n := 0
	next := func() int { n++; return n }
	// "mix": every path in turn on one key.
	for round := 0; round < 3; round++ {
		v := next()
		_, err := c.Insert(ctx, seqArgs{Key: "mix", N: v, FailOnce: round == 1}, &jobs.InsertOpts{Sequence: "mix"})
		require.NoError(t, err)
		want["mix"] = append(want["mix"], v)
		if round == 1 {
			want["mix"] = append(want["mix"], v) // its retry, before the next one
		}
		res, err := c.InsertMany(ctx, many(seq("mix", next(), false), jobs.InsertManyParams{Args: seqArgs{Key: "plain", N: -1}},
			seq("many", next(), false), seq("mix", next(), false), seq("many", next(), false)))
		require.NoError(t, err)
		require.Len(t, res, 5)
		require.Equal(t, "mix", res[0].Job.SequenceKey)
		require.Empty(t, res[1].Job.SequenceKey)
		require.Equal(t, generics.JobStateWaiting, res[3].Job.State, "the second job of a key in one call waits for the first")
		sqlEnqueue(pool, "mix", next())
		sqlEnqueue(pool, "sql", next())
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = c.InsertManyTx(ctx, tx, many(seq("mix", next(), false), seq("manytx", next(), round == 2)))
		require.NoError(t, err)
		sqlEnqueue(tx, "sql", next())
		_, err = c.InsertManyTx(ctx, tx, many(seq("manytx", next(), false), seq("mix", next(), false)))
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}
	want["manytx"] = slices.Insert(want["manytx"], 5, want["manytx"][4]) // round 2's first manytx job fails once
	total := 0
	for _, ns := range want {
		total += len(ns)
	}
	total += 3 - 2 // three plain jobs; two retries counted twice in want

	var (
		mu      sync.Mutex
		running = map[string]int{}
		order   = map[string][]int{}
		overlap []string
	)
	handler := func(ctx context.Context, job *generics.Job[seqArgs]) error {
		if job.Args.N < 0 {
			return nil
		}
		mu.Lock()
		running[job.Args.Key]++
		if running[job.Args.Key] > 1 {
			overlap = append(overlap, fmt.Sprintf("%s/%d", job.Args.Key, job.Args.N))
		}
		order[job.Args.Key] = append(order[job.Args.Key], job.Args.N)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		running[job.Args.Key]--
		mu.Unlock()
		if job.Args.FailOnce && job.Attempt == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	for i := 0; i < 2; i++ {
		w, err := worker.New(pool, fastConfig(map[string]worker.QueueConfig{jobs.DefaultQueue: {Concurrency: 6}}))
		require.NoError(t, err)
		worker.MustRegister(w, handler, &worker.HandlerOptions{Retry: fastRetry})
		startWorker(t, w)
	}
	var samples atomic.Int64
	stop := make(chan struct{})
	bad := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			var key string
			err := pool.QueryRow(ctx, `SELECT r.sequence_key FROM tenure.jobs r
				WHERE r.state = 'running' AND r.sequence_key IS NOT NULL
				  AND (EXISTS (SELECT 1 FROM tenure.jobs o WHERE o.sequence_key = r.sequence_key AND o.state = 'running' AND o.id <> r.id)
				       OR EXISTS (SELECT 1 FROM tenure.jobs o WHERE o.sequence_key = r.sequence_key AND o.id < r.id AND o.state <> 'succeeded'))
				LIMIT 1`).Scan(&key)
			if err == nil {
				select {
				case bad <- key:
				default:
				}
			}
			samples.Add(1)
		}
	}()
	waitFor(t, 60*time.Second, "every job succeeded", func() bool { return countState(t, pool, "succeeded") == total })
	close(stop)
	<-done
	select {
	case k := <-bad:
		t.Fatalf("sequence %s had two running jobs, or one running ahead of an unfinished earlier job", k)
	default:
	}
	require.Positive(t, samples.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlap)
	for _, k := range []string{"mix", "many", "manytx", "sql"} {
		require.Equal(t, want[k], order[k], k)
	}
}

package jobs_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/internal/plantest"
	"github.com/tenureq/tenure/jobs"
)

type receiptArgs struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
	Note    string `json:"note,omitempty"`
}

func (receiptArgs) Kind() string        { return "receipt" }
func (receiptArgs) PayloadVersion() int { return 1 }

func jobCount(t testing.TB, ctx context.Context, c *jobs.Client, kind string) int {
	t.Helper()
	page, err := c.List(ctx, jobs.ListParams{Kind: kind, Limit: 1000})
	require.NoError(t, err)
	return len(page.Jobs)
}

// 32 goroutines on their own connections insert the same unique job 1,000 times each: the
// database keeps exactly one row, every insert returns it, and exactly one insert reports
// that it inserted (the others are duplicates).
func TestUniqueInsertUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	const goroutines, each = 32, 1000
	var inserted, duplicates atomic.Int64
	ids := make(chan int64, goroutines)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var id int64
			for i := 0; i < each; i++ {
				row, err := c.Insert(ctx, receiptArgs{OrderID: 7, Email: "a@b.c"}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}})
				if err != nil {
					errs <- err
					return
				}
				if id != 0 && row.Job.ID != id {
					errs <- errors.New("two different jobs returned for one unique key")
					return
				}
				id = row.Job.ID
				if row.Duplicate {
					duplicates.Add(1)
				} else {
					inserted.Add(1)
				}
			}
			ids <- id
		}()
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("%d unique inserts on %d goroutines in %v", goroutines*each, goroutines, time.Since(start))
	require.EqualValues(t, 1, inserted.Load())
	require.EqualValues(t, goroutines*each-1, duplicates.Load())
	var first int64
	for id := range ids {
		if first == 0 {
			first = id
		}
		require.Equal(t, first, id)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n))
	require.Equal(t, 1, n)
	row, err := c.Get(ctx, first)
	require.NoError(t, err)
	require.Len(t, row.UniqueKey, 32)
	require.Equal(t, []generics.JobState{generics.JobStateReady, generics.JobStateRunning}, row.UniqueStates)
}

// The same contest through InsertMany: 8 goroutines insert batches that each repeat the key
// and mix in plain jobs; one unique row results, every plain job is inserted.
func TestUniqueInsertManyUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	u := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"order_id"}}}
	var wg sync.WaitGroup
	var inserted atomic.Int64
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				res, err := c.InsertMany(ctx, []jobs.InsertManyParams{
					{Args: receiptArgs{OrderID: 1, Email: "a@b.c"}, Opts: u},
					{Args: blobArgs{Data: "plain"}},
					{Args: receiptArgs{OrderID: 1, Email: "other@b.c"}, Opts: u}, // same order_id: same key
				})
				if err != nil {
					errs <- err
					return
				}
				if res[1].Duplicate || !res[2].Duplicate || res[0].Job.ID != res[2].Job.ID {
					errs <- errors.New("wrong per-row results")
					return
				}
				if !res[0].Duplicate {
					inserted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, inserted.Load())
	require.Equal(t, 1, jobCount(t, ctx, c, "receipt"))
	require.Equal(t, 8*50, jobCount(t, ctx, c, "blob"))
}

// What the key is made of: kind always; args (all or named fields), queue and period on
// request.
func TestUniqueKeyComposition(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	ins := func(a receiptArgs, o *jobs.InsertOpts) *jobs.InsertResult {
		t.Helper()
		r, err := c.Insert(ctx, a, o)
		require.NoError(t, err)
		return r
	}
	// by kind only: one live receipt whatever the args
	kindOnly := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{}}
	a := ins(receiptArgs{OrderID: 1}, kindOnly)
	b := ins(receiptArgs{OrderID: 2}, kindOnly)
	require.False(t, a.Duplicate)
	require.True(t, b.Duplicate)
	require.Equal(t, a.Job.ID, b.Job.ID)

	// by all args: different args, different jobs; field order and whitespace do not matter
	all := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}, Queue: "q1"}
	x := ins(receiptArgs{OrderID: 1, Email: "a"}, all)
	y := ins(receiptArgs{OrderID: 1, Email: "b"}, all)
	z := ins(receiptArgs{OrderID: 1, Email: "a"}, all)
	require.False(t, x.Duplicate)
	require.False(t, y.Duplicate)
	require.True(t, z.Duplicate)
	require.Equal(t, x.Job.ID, z.Job.ID)

	// by named field: only order_id counts; the field order given does not matter
	f1 := ins(receiptArgs{OrderID: 9, Email: "a"}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"order_id", "email"}}, Queue: "q2"})
	f2 := ins(receiptArgs{OrderID: 9, Email: "a", Note: "x"}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"email", "order_id"}}, Queue: "q2"})
	require.True(t, f2.Duplicate)
	require.Equal(t, f1.Job.ID, f2.Job.ID)

	// by queue: the same args may wait in two queues, not twice in one
	byQ := func(q string) *jobs.InsertOpts {
		return &jobs.InsertOpts{Queue: q, Unique: &jobs.UniqueOpts{ByArgs: true, ByQueue: true}}
	}
	q1 := ins(receiptArgs{OrderID: 5}, byQ("a"))
	q2 := ins(receiptArgs{OrderID: 5}, byQ("b"))
	q3 := ins(receiptArgs{OrderID: 5}, byQ("a"))
	require.False(t, q2.Duplicate)
	require.NotEqual(t, q1.Job.ID, q2.Job.ID)
	require.True(t, q3.Duplicate)

	// by period: within one window a duplicate; the window is on the database clock
	per := &jobs.InsertOpts{Queue: "p", Unique: &jobs.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}}
	p1 := ins(receiptArgs{OrderID: 77}, per)
	p2 := ins(receiptArgs{OrderID: 77}, per)
	require.True(t, p2.Duplicate)
	require.Equal(t, p1.Job.ID, p2.Job.ID)
	// a different period is a different key
	p3 := ins(receiptArgs{OrderID: 77}, &jobs.InsertOpts{Queue: "p", Unique: &jobs.UniqueOpts{ByArgs: true, ByPeriod: 2 * time.Hour}})
	require.False(t, p3.Duplicate)
}

// A period window ends on the database clock: the same insert in the next window is new.
func TestUniquePeriodWindowMoves(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	o := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true, ByPeriod: time.Second, States: []generics.JobState{generics.JobStateSucceeded}}}
	first, err := c.Insert(ctx, receiptArgs{OrderID: 1}, o)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second) // a liveness bound: the window is 1 s of the database clock
	for {
		r, err := c.Insert(ctx, receiptArgs{OrderID: 1}, o)
		require.NoError(t, err)
		if !r.Duplicate {
			require.NotEqual(t, first.Job.ID, r.Job.ID)
			break
		}
		require.Equal(t, first.Job.ID, r.Job.ID)
		require.True(t, time.Now().Before(deadline), "the window never moved")
		time.Sleep(50 * time.Millisecond)
	}
}

// The key is freed when its job leaves its unique states (here: an operator cancel), kept
// when the state is listed, and an operator action that would bring a job back while another
// holds its key is refused with a typed error, changing nothing.
func TestUniqueStatesAndOperatorActions(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	act := jobs.Action{Actor: "test", Reason: "unique"}
	o := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}

	a, err := c.Insert(ctx, receiptArgs{OrderID: 1}, o)
	require.NoError(t, err)
	_, err = c.Cancel(ctx, a.Job.ID, act)
	require.NoError(t, err)
	// cancelled is not a unique state by default: the key is free
	b, err := c.Insert(ctx, receiptArgs{OrderID: 1}, o)
	require.NoError(t, err)
	require.False(t, b.Duplicate)
	require.NotEqual(t, a.Job.ID, b.Job.ID)

	// retrying the cancelled one would make two holders: refused, typed, nothing changed
	_, err = c.Retry(ctx, a.Job.ID, act)
	require.ErrorIs(t, err, jobs.ErrUniqueConflict)
	var uce *jobs.UniqueConflictError
	require.True(t, errors.As(err, &uce))
	require.Equal(t, b.Job.ID, uce.HolderID)
	got, err := c.Get(ctx, a.Job.ID)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateCancelled, got.State)
	entries, err := c.Audit(ctx, a.Job.ID, 0, 100)
	require.NoError(t, err)
	for _, e := range entries {
		require.NotEqual(t, "retry", e.Action, "a refused retry must not be audited")
	}

	// once the holder is gone, the retry goes through
	_, err = c.Cancel(ctx, b.Job.ID, act)
	require.NoError(t, err)
	got, err = c.Retry(ctx, a.Job.ID, act)
	require.NoError(t, err)
	require.Equal(t, generics.JobStateReady, got.State)
	d, err := c.Insert(ctx, receiptArgs{OrderID: 1}, o)
	require.NoError(t, err)
	require.True(t, d.Duplicate)
	require.Equal(t, a.Job.ID, d.Job.ID)

	// with cancelled among its states, a cancelled job keeps its key
	keep := &jobs.InsertOpts{Queue: "k", Unique: &jobs.UniqueOpts{ByArgs: true, ByQueue: true, States: []generics.JobState{generics.JobStateCancelled}}}
	k1, err := c.Insert(ctx, receiptArgs{OrderID: 2}, keep)
	require.NoError(t, err)
	_, err = c.Cancel(ctx, k1.Job.ID, act)
	require.NoError(t, err)
	k2, err := c.Insert(ctx, receiptArgs{OrderID: 2}, keep)
	require.NoError(t, err)
	require.True(t, k2.Duplicate)
	require.Equal(t, k1.Job.ID, k2.Job.ID)
	require.Equal(t, generics.JobStateCancelled, k2.Job.State)
}

// A unique insert inside a transaction that rolls back leaves the key free; a concurrent
// insert of the same key waits for the first transaction and then inserts (rollback) or
// returns the first job (commit).
func TestUniqueInsertWaitsForConcurrentTransaction(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	o := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}
	for _, commit := range []bool{false, true} {
		args := receiptArgs{OrderID: 100}
		if commit {
			args.OrderID = 200
		}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		first, err := c.InsertTx(ctx, tx, args, o)
		require.NoError(t, err)
		done := make(chan *jobs.InsertResult, 1)
		go func() {
			r, err := c.Insert(ctx, args, o)
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		// The second insert waits on the first transaction's lock (observed in pg_locks, not
		// guessed from a pause), and has not returned.
		var holder int32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))
		require.Eventually(t, func() bool {
			var waiting bool
			err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))", holder).Scan(&waiting)
			return err == nil && waiting
		}, 30*time.Second, 5*time.Millisecond, "the second insert never waited for the first transaction")
		select {
		case <-done:
			t.Fatal("the second insert did not wait for the first transaction")
		default:
		}
		if commit {
			require.NoError(t, tx.Commit(ctx))
			r := <-done
			require.True(t, r.Duplicate)
			require.Equal(t, first.Job.ID, r.Job.ID)
		} else {
			require.NoError(t, tx.Rollback(ctx))
			r := <-done
			require.False(t, r.Duplicate)
			require.NotEqual(t, first.Job.ID, r.Job.ID)
		}
	}
}

func TestUniqueOptionsRefusedAreTyped(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	for name, u := range map[string]*jobs.UniqueOpts{
		"period too short": {ByPeriod: time.Millisecond},
		"negative period":  {ByPeriod: -time.Second},
		"unknown state":    {States: []generics.JobState{"waiting"}},
		"missing field":    {Fields: []string{"order"}},
		"omitted field":    {Fields: []string{"note"}}, // omitempty and empty: absent
	} {
		_, err := c.Insert(ctx, receiptArgs{OrderID: 1}, &jobs.InsertOpts{Unique: u})
		require.ErrorIs(t, err, jobs.ErrInvalidOptions, name)
		var oe *jobs.OptionError
		require.True(t, errors.As(err, &oe), name)
	}
	_, err = c.InsertMany(ctx, []jobs.InsertManyParams{{Args: receiptArgs{OrderID: 1}}, {Args: receiptArgs{}, Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"x"}}}}})
	require.ErrorIs(t, err, jobs.ErrInvalidOptions)
	require.Equal(t, 0, jobCount(t, ctx, c, "receipt"), "nothing is written when an insert is refused")
}

// The unique path's plans, generic as the pool's prepared statements run them: the
// duplicate look-up reads jobs_unique_idx and the insert names it as its conflict arbiter.
func TestUniqueInsertPlanUsesIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	// enough rows that a sequential scan would cost more than the index
	params := make([]jobs.InsertManyParams, 5000)
	for i := range params {
		params[i] = jobs.InsertManyParams{Args: receiptArgs{OrderID: int64(i)}, Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}}
	}
	_, err = c.InsertMany(ctx, params)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "ANALYZE tenure.jobs")
	require.NoError(t, err)

	sql, names := plantest.SQL(t, "InsertJob")
	vals := map[string]any{
		"is_unique": true, "kind": "receipt", "unique_queue": nil, "payload": []byte(`{"order_id":1,"email":""}`),
		"unique_by_args": true, "unique_fields": []string{}, "unique_period_ms": int64(0), "queue": "default",
		"payload_version": int32(1), "priority": int16(2), "run_at": nil, "delay_us": int64(0), "max_attempts": int32(25),
		"lease_ms": int32(30000), "metadata": []byte("{}"), "tags": []string{}, "unique_states": int16(3), "notify": false,
	}
	args := make([]any, len(names))
	for i, n := range names {
		v, ok := vals[n]
		require.True(t, ok, "no value for parameter %s", n)
		args[i] = v
	}
	plan := plantest.Explain(t, pool, true, sql, args...)
	require.True(t, plantest.Indexes(plan)["jobs_unique_idx"], "the duplicate look-up must read jobs_unique_idx")
	require.Contains(t, plantest.Arbiters(plan), "jobs_unique_idx")

	sql, _ = plantest.SQL(t, "InsertUniqueJobs")
	require.Contains(t, sql, "ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND tenure.unique_state_held(unique_states, state)")

	// And the pool's own prepared statement, run enough times for a generic plan, still
	// returns the duplicate (it found the holder through the index).
	for i := 0; i < 8; i++ {
		r, err := c.Insert(ctx, receiptArgs{OrderID: 1}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}})
		require.NoError(t, err)
		require.True(t, r.Duplicate)
	}
	var n int
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs").Scan(&n)
	}))
	require.Equal(t, 5000, n)
}

// tenure.enqueue and the Go client share keys and the same race-free insert: 8 connections
// call tenure.enqueue while 8 goroutines call Insert, all for one key; one row results and
// every call returns it.
func TestUniqueSQLAndGoEnqueueConcurrently(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	const each = 200
	var wg sync.WaitGroup
	ids := make(chan int64, 16*each)
	errs := make(chan error, 16)
	var inserted atomic.Int64
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(sql bool) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				var id int64
				var dup bool
				if sql {
					if err := pool.QueryRow(ctx, `SELECT id, duplicate FROM tenure.enqueue('receipt', '{"order_id": 3, "email": "x"}', unique_args => '{order_id}')`).Scan(&id, &dup); err != nil {
						errs <- err
						return
					}
				} else {
					r, err := c.Insert(ctx, receiptArgs{OrderID: 3, Email: "y"}, &jobs.InsertOpts{Unique: &jobs.UniqueOpts{Fields: []string{"order_id"}}})
					if err != nil {
						errs <- err
						return
					}
					id, dup = r.Job.ID, r.Duplicate
				}
				if !dup {
					inserted.Add(1)
				}
				ids <- id
			}
		}(g%2 == 0)
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, inserted.Load())
	var first int64
	for id := range ids {
		if first == 0 {
			first = id
		}
		require.Equal(t, first, id)
	}
	require.Equal(t, 1, jobCount(t, ctx, c, "receipt"))
}

// In a REPEATABLE READ transaction a holder committed after the snapshot cannot be returned:
// the unique insert fails with a serialization failure and writes nothing.
func TestUniqueInsertInRepeatableRead(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	o := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1") // take the snapshot
	require.NoError(t, err)
	holder, err := c.Insert(ctx, receiptArgs{OrderID: 5}, o) // commits after the snapshot
	require.NoError(t, err)
	_, err = c.InsertTx(ctx, tx, receiptArgs{OrderID: 5}, o)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, "40001", pe.Code)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, jobCount(t, ctx, c, "receipt"))
	again, err := c.Insert(ctx, receiptArgs{OrderID: 5}, o)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, holder.Job.ID, again.Job.ID)
}

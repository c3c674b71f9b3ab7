package jobs_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// insertMethod is one of the four insert methods, reduced to "insert these jobs, return one
// result per job": the single forms are called once per job.
type insertMethod struct {
	name string
	run  func(ctx context.Context, c *jobs.Client, pool *pgxpool.Pool, ps []jobs.InsertManyParams) ([]*jobs.InsertResult, error)
}

var insertMethods = []insertMethod{
	{"Insert", func(ctx context.Context, c *jobs.Client, _ *pgxpool.Pool, ps []jobs.InsertManyParams) ([]*jobs.InsertResult, error) {
		var out []*jobs.InsertResult
		for _, p := range ps {
			r, err := c.Insert(ctx, p.Args, p.Opts)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}},
	{"InsertTx", func(ctx context.Context, c *jobs.Client, pool *pgxpool.Pool, ps []jobs.InsertManyParams) ([]*jobs.InsertResult, error) {
		var out []*jobs.InsertResult
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, p := range ps {
				r, err := c.InsertTx(ctx, tx, p.Args, p.Opts)
				if err != nil {
					return err
				}
				out = append(out, r)
			}
			return nil
		})
		return out, err
	}},
	{"InsertMany", func(ctx context.Context, c *jobs.Client, _ *pgxpool.Pool, ps []jobs.InsertManyParams) ([]*jobs.InsertResult, error) {
		return c.InsertMany(ctx, ps)
	}},
	{"InsertManyTx", func(ctx context.Context, c *jobs.Client, pool *pgxpool.Pool, ps []jobs.InsertManyParams) ([]*jobs.InsertResult, error) {
		var out []*jobs.InsertResult
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			out, err = c.InsertManyTx(ctx, tx, ps)
			return err
		})
		return out, err
	}},
}

// requireStored checks that r.Job is the job as stored now (jobs.Client.Get), whole.
func requireStored(t *testing.T, c *jobs.Client, r *jobs.InsertResult) {
	t.Helper()
	require.NotNil(t, r)
	require.NotNil(t, r.Job)
	got, err := c.Get(context.Background(), r.Job.ID)
	require.NoError(t, err)
	require.Equal(t, got, r.Job)
}

// TestInsertResultShape: every insert method returns, per job in input order, the stored row
// and whether the job was a duplicate: a plain job, a unique job whose key a stored job holds
// (Duplicate, the holder's row), and two jobs of one call with one key (the first inserted,
// the second its duplicate).
func TestInsertResultShape(t *testing.T) {
	t.Parallel()
	for _, path := range insertMethods {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewPool(t)
			ctx := context.Background()
			c, err := jobs.NewClient(pool, nil)
			require.NoError(t, err)
			uniq := &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}, Tags: []string{"u"}}
			held, err := c.Insert(ctx, receiptArgs{OrderID: 1, Email: "a@b.c"}, uniq)
			require.NoError(t, err)
			require.False(t, held.Duplicate)

			res, err := path.run(ctx, c, pool, []jobs.InsertManyParams{
				{Args: blobArgs{Data: "plain"}, Opts: &jobs.InsertOpts{Queue: "q1", Priority: jobs.PriorityHigh, Metadata: map[string]string{"k": "v"}}},
				{Args: receiptArgs{OrderID: 1, Email: "a@b.c"}, Opts: uniq}, // key held by a stored job
				{Args: receiptArgs{OrderID: 2, Email: "a@b.c"}, Opts: uniq}, // new key
				{Args: blobArgs{Data: "plain2"}},
				{Args: receiptArgs{OrderID: 2, Email: "a@b.c"}, Opts: uniq}, // the key of input 2
			})
			require.NoError(t, err)
			require.Len(t, res, 5)
			for _, r := range res {
				requireStored(t, c, r)
			}
			require.False(t, res[0].Duplicate)
			require.Equal(t, "blob", res[0].Job.Kind)
			require.Equal(t, "q1", res[0].Job.Queue)
			require.Equal(t, jobs.PriorityHigh, res[0].Job.Priority)
			require.Equal(t, map[string]string{"k": "v"}, res[0].Job.Metadata)
			require.JSONEq(t, `{"data": "plain"}`, string(res[0].Job.Payload))
			require.Equal(t, generics.JobStateReady, res[0].Job.State)
			require.Zero(t, res[0].Job.Attempt)
			require.Nil(t, res[0].Job.ClaimToken)

			require.True(t, res[1].Duplicate, "a stored job holds the key")
			require.Equal(t, held.Job.ID, res[1].Job.ID)

			require.False(t, res[2].Duplicate)
			require.NotEqual(t, held.Job.ID, res[2].Job.ID)
			require.Len(t, res[2].Job.UniqueKey, 32)
			require.Equal(t, []string{"u"}, res[2].Job.Tags)

			require.False(t, res[3].Duplicate)
			require.Equal(t, "blob", res[3].Job.Kind)

			require.True(t, res[4].Duplicate, "an earlier job of the same call holds the key")
			require.Equal(t, res[2].Job.ID, res[4].Job.ID)

			// Exactly the non-duplicates were stored.
			require.Equal(t, 4, count(t, c))
		})
	}
}

// TestInsertSQLTx: InsertTx and InsertManyTx through a database/sql transaction of pgx's
// stdlib driver (jobs.SQLTx): committed jobs are stored as the results say and signalled;
// rolled-back ones are neither; invalid args leave the transaction usable.
func TestInsertSQLTx(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	db, err := sql.Open("pgx", pool.Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	_, err = db.ExecContext(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY)")
	require.NoError(t, err)

	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_jobs")
	require.NoError(t, err)
	// nextSignal returns the next new-job signal's payload; a sentinel sent after the
	// transaction under test marks "nothing before it".
	nextSignal := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listen.Conn().WaitForNotification(wctx)
		require.NoError(t, err)
		return n.Payload
	}
	sentinel := func() {
		t.Helper()
		_, err := pool.Exec(ctx, "SELECT pg_notify('tenure_jobs', 'sentinel')")
		require.NoError(t, err)
	}
	uniq := &jobs.InsertOpts{Queue: "sqlq", Unique: &jobs.UniqueOpts{ByArgs: true}}

	t.Run("rollback", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = c.InsertTx(ctx, jobs.SQLTx(tx), emailArgs{To: "r@b.c"}, &jobs.InsertOpts{Queue: "sqlq"})
		require.NoError(t, err)
		_, err = c.InsertTx(ctx, jobs.SQLTx(tx), receiptArgs{OrderID: 9}, uniq)
		require.NoError(t, err)
		_, err = c.InsertManyTx(ctx, jobs.SQLTx(tx), []jobs.InsertManyParams{{Args: blobArgs{Data: "r"}, Opts: &jobs.InsertOpts{Queue: "sqlq"}}})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		require.Equal(t, 0, count(t, c))
		sentinel()
		require.Equal(t, "sentinel", nextSignal(), "a rolled-back insert sends no signal")
	})

	t.Run("commit", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(ctx, "INSERT INTO orders VALUES (1)")
		require.NoError(t, err)
		stx := jobs.SQLTx(tx)
		plain, err := c.InsertTx(ctx, stx, emailArgs{To: "a@b.c", Subject: "s"},
			&jobs.InsertOpts{Queue: "sqlq", Tags: []string{"t1", "t2"}, Metadata: map[string]string{"k": "v"}})
		require.NoError(t, err)
		require.False(t, plain.Duplicate)
		first, err := c.InsertTx(ctx, stx, receiptArgs{OrderID: 1, Email: "a@b.c"}, uniq)
		require.NoError(t, err)
		require.False(t, first.Duplicate)
		dup, err := c.InsertTx(ctx, stx, receiptArgs{OrderID: 1, Email: "a@b.c"}, uniq)
		require.NoError(t, err)
		require.True(t, dup.Duplicate)
		require.Equal(t, first.Job.ID, dup.Job.ID)
		require.Equal(t, first.Job, dup.Job)

		// Invalid args and options: a typed error, nothing sent, the transaction usable.
		_, err = c.InsertTx(ctx, stx, emailArgs{To: "not-an-address"}, nil)
		var pe *generics.PayloadError
		require.ErrorAs(t, err, &pe)
		_, err = c.InsertManyTx(ctx, stx, []jobs.InsertManyParams{{Args: blobArgs{Data: "x"}, Opts: &jobs.InsertOpts{Priority: 99}}})
		var oe *jobs.OptionError
		require.ErrorAs(t, err, &oe)

		many, err := c.InsertManyTx(ctx, stx, []jobs.InsertManyParams{
			{Args: blobArgs{Data: "m1"}, Opts: &jobs.InsertOpts{Queue: "sqlq"}},
			{Args: receiptArgs{OrderID: 1, Email: "a@b.c"}, Opts: uniq}, // held by first
			{Args: receiptArgs{OrderID: 2, Email: "a@b.c"}, Opts: uniq},
			{Args: receiptArgs{OrderID: 2, Email: "a@b.c"}, Opts: uniq}, // held by the one before
		})
		require.NoError(t, err)
		require.Len(t, many, 4)
		require.False(t, many[0].Duplicate)
		require.True(t, many[1].Duplicate)
		require.Equal(t, first.Job.ID, many[1].Job.ID)
		require.False(t, many[2].Duplicate)
		require.True(t, many[3].Duplicate)
		require.Equal(t, many[2].Job.ID, many[3].Job.ID)

		// Not visible outside the transaction before it commits.
		_, err = c.Get(ctx, plain.Job.ID)
		require.ErrorIs(t, err, jobs.ErrNotFound)
		require.NoError(t, tx.Commit())

		for _, r := range []*jobs.InsertResult{plain, first, dup, many[0], many[1], many[2], many[3]} {
			requireStored(t, c, r)
		}
		require.Equal(t, []string{"t1", "t2"}, plain.Job.Tags)
		require.Equal(t, map[string]string{"k": "v"}, plain.Job.Metadata)
		require.Equal(t, "sqlq", plain.Job.Queue)
		require.Equal(t, generics.JobStateReady, plain.Job.State)
		require.Equal(t, []generics.JobState{generics.JobStateReady, generics.JobStateRunning}, first.Job.UniqueStates)
		require.Equal(t, 4, count(t, c))
		var orders int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&orders))
		require.Equal(t, 1, orders)
		// The committed inserts signalled their queue.
		got := nextSignal()
		require.Regexp(t, "^sqlq\x1f", got)
	})

	t.Run("nil", func(t *testing.T) {
		_, err := c.InsertTx(ctx, nil, blobArgs{}, nil)
		var oe *jobs.OptionError
		require.True(t, errors.As(err, &oe))
		_, err = c.InsertManyTx(ctx, nil, []jobs.InsertManyParams{{Args: blobArgs{}}})
		require.True(t, errors.As(err, &oe))
	})
}

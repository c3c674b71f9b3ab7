package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/internal/pgtest"
	"github.com/tenureq/tenure/jobs"
)

// TestInsertManyFastStoresWhatInsertManyStores: the same params through InsertMany and
// InsertManyFast give the same rows (every column but id and the insert times), the new-job
// signal goes out for the due bands, and a unique job is refused with nothing inserted.
func TestInsertManyFastStoresWhatInsertManyStores(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)

	past := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
	params := func(kind string) []jobs.InsertManyParams {
		var ps []jobs.InsertManyParams
		for i := range 300 {
			o := &jobs.InsertOpts{Priority: 1 + i%4, MaxAttempts: 1 + i%7, Lease: time.Duration(1+i%5) * time.Second,
				Metadata: map[string]string{"i": fmt.Sprint(i)}, Tags: []string{"t" + fmt.Sprint(i%3)}, FairKey: fmt.Sprint("k", i%2)}
			switch i % 3 {
			case 1:
				o.Delay = time.Hour
			case 2:
				o.RunAt = past
			}
			if i%10 == 0 {
				o.Queue = "other"
			}
			ps = append(ps, jobs.InsertManyParams{Args: kindArgs{kind}, Opts: o})
		}
		return ps
	}

	_, err = c.InsertMany(ctx, params("slow"))
	require.NoError(t, err)
	listen, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listen.Release()
	_, err = listen.Exec(ctx, "LISTEN tenure_jobs")
	require.NoError(t, err)

	n, err := c.InsertManyFast(ctx, params("fast"))
	require.NoError(t, err)
	require.EqualValues(t, 300, n)

	cols := `queue, priority, payload::text, payload_version, max_attempts, lease_ms, metadata::text, tags::text, state, attempts,
	         CASE WHEN run_at = created_at THEN 'now' WHEN run_at > created_at THEN 'later' ELSE run_at::text END`
	read := func(kind string) []string {
		rows, err := pool.Query(ctx, `SELECT concat_ws('|', `+cols+`) FROM tenure.jobs WHERE kind = $1 ORDER BY id`, kind)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	require.Equal(t, read("slow"), read("fast"))

	// Every job due at once, no metadata or tags: COPY leaves run_at, metadata and tags to
	// their defaults; the rows are still the same.
	plain := func(kind string) []jobs.InsertManyParams {
		var ps []jobs.InsertManyParams
		for i := range 50 {
			ps = append(ps, jobs.InsertManyParams{Args: kindArgs{kind}, Opts: &jobs.InsertOpts{Priority: 1 + i%3}})
		}
		return ps
	}
	_, err = c.InsertMany(ctx, plain("slow-plain"))
	require.NoError(t, err)
	n, err = c.InsertManyFast(ctx, plain("fast-plain"))
	require.NoError(t, err)
	require.EqualValues(t, 50, n)
	require.Equal(t, read("slow-plain"), read("fast-plain"))

	// InsertManyFast signalled every band it gave due jobs (queue, priority)
	seen := map[string]bool{}
	for {
		wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		n, err := listen.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		f := strings.Split(n.Payload, "\x1f") // queue␟priority␟due time
		require.Len(t, f, 3)
		seen[f[0]+"/"+f[1]] = true
	}
	want := map[string]bool{}
	for i := range 300 {
		if i%3 != 1 { // due now or in the past
			q := "default"
			if i%10 == 0 {
				q = "other"
			}
			want[fmt.Sprintf("%s/%d", q, 1+i%4)] = true
		}
	}
	require.Equal(t, want, seen)

	_, err = c.InsertManyFast(ctx, []jobs.InsertManyParams{{Args: kindArgs{"fast-unique"}},
		{Args: kindArgs{"fast-unique"}, Opts: &jobs.InsertOpts{Unique: &jobs.UniqueOpts{ByArgs: true}}}})
	var oe *jobs.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Unique", oe.Field)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs WHERE kind = 'fast-unique'`).Scan(&left))
	require.Zero(t, left)
}

// panicArgs panics while being encoded.
type panicArgs struct{}

func (panicArgs) Kind() string                 { return "panics" }
func (panicArgs) PayloadVersion() int          { return 1 }
func (panicArgs) MarshalJSON() ([]byte, error) { panic("args exploded") }

// TestInsertManyFastBadArgsPartWay: InsertManyFast encodes args while earlier rows are being
// sent, so a job whose args fail (too large) or panic ends the COPY part-way. The call returns
// the job's own typed error (or panics on the caller's goroutine), inserts nothing, and leaves
// the pool's connections usable; InsertManyFastTx refuses the same jobs before sending anything,
// so the caller's transaction goes on and commits its other writes.
func TestInsertManyFastBadArgsPartWay(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, &jobs.Config{MaxPayloadBytes: 1024})
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs`).Scan(&n))
		return n
	}
	batch := func(bad generics.Args, at int) []jobs.InsertManyParams {
		ps := make([]jobs.InsertManyParams, 3000) // ~900 KB of rows: the COPY is well under way at job 2500
		for i := range ps {
			ps[i] = jobs.InsertManyParams{Args: blobArgs{Data: strings.Repeat("x", 250)}}
		}
		ps[at] = jobs.InsertManyParams{Args: bad}
		return ps
	}

	_, err = c.InsertManyFast(ctx, batch(blobArgs{Data: strings.Repeat("y", 2000)}, 2500))
	var pe *generics.PayloadError
	require.ErrorAs(t, err, &pe)
	require.ErrorIs(t, err, generics.ErrPayloadTooLarge)
	require.Contains(t, err.Error(), "job 2500 of 3000")
	require.Zero(t, count())

	require.PanicsWithValue(t, "args exploded", func() { _, _ = c.InsertManyFast(ctx, batch(panicArgs{}, 2999)) })
	require.Zero(t, count())

	// Every connection of the pool still works, and a good call goes through.
	for range int(pool.Config().MaxConns) + 1 {
		n, err := c.InsertManyFast(ctx, batch(blobArgs{Data: "ok"}, 0))
		require.NoError(t, err)
		require.EqualValues(t, 3000, n)
	}
	require.Equal(t, 3000*(int(pool.Config().MaxConns)+1), count())

	// In the caller's transaction: refused before anything is sent; the transaction goes on.
	_, err = pool.Exec(ctx, `TRUNCATE tenure.jobs`)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = c.InsertManyFastTx(ctx, tx, batch(blobArgs{Data: strings.Repeat("y", 2000)}, 2500))
	require.ErrorIs(t, err, generics.ErrPayloadTooLarge)
	_, err = c.InsertTx(ctx, tx, blobArgs{Data: "after"}, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, count())
}

package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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

package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// TestLimitsMatchTheDatabase: the one definition of every limit (generics/limits.go) is the one
// the database applies (tenure.limit, used by its constraints and tenure.enqueue).
func TestLimitsMatchTheDatabase(t *testing.T) {
	pool := pgtest.NewPool(t)
	for name, goValue := range map[string]int{
		"args": generics.MaxArgsBytes, "output": generics.MaxOutputBytes, "effect_result": generics.MaxEffectResultBytes,
		"metadata": generics.MaxMetadataBytes, "metadata_entries": generics.MaxMetadataEntries,
		"metadata_key": generics.MaxMetadataKeyBytes, "tags": generics.MaxTags, "tag": generics.MaxTagBytes,
		"kind": generics.MaxKindChars, "queue": generics.MaxQueueChars, "error_message": generics.MaxErrorMessageBytes,
		"error_history": generics.MaxErrorHistory, "name": generics.MaxNameChars, "reason": generics.MaxReasonChars,
	} {
		var dbValue *int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT tenure.limit($1)`, name).Scan(&dbValue))
		require.NotNil(t, dbValue, "tenure.limit(%q) is not defined", name)
		require.Equal(t, goValue, *dbValue, "limit %q: Go and the database disagree", name)
	}
	// The aliases the packages export are the same numbers.
	require.Equal(t, generics.MaxOutputBytes, worker.MaxOutputBytes)
	require.Equal(t, generics.MaxEffectResultBytes, worker.MaxEffectResultBytes)
	require.Equal(t, generics.MaxMetadataBytes, jobs.MaxMetadataBytes)
	require.Equal(t, generics.MaxTags, jobs.MaxTags)
	require.Equal(t, generics.DefaultMaxPayloadBytes, generics.MaxArgsBytes)
}

type limitArgs struct {
	S string `json:"s"`
}

func (limitArgs) Kind() string        { return "limit_blob" }
func (limitArgs) PayloadVersion() int { return 1 }

// blobOfSize returns args whose payload is exactly n bytes of jsonb text: {"s": "…"}.
func blobOfSize(n int) limitArgs { return limitArgs{S: strings.Repeat("x", n-len(`{"s": ""}`))} }

// insertPath is one way a job gets into tenure.jobs.
type insertPath struct {
	name   string
	insert func(ctx context.Context, c *jobs.Client, pool *pgxpool.Pool, args limitArgs, opts *jobs.InsertOpts) error
}

func sqlEnqueue(ctx context.Context, pool *pgxpool.Pool, args limitArgs, opts *jobs.InsertOpts) error {
	payload, err := generics.Encode(args, generics.MaxArgsBytes*2)
	if err != nil {
		// the SQL path is given what Go would refuse, to see the database refuse it too
		payload = []byte(fmt.Sprintf(`{"s": %q}`, args.S))
	}
	var md []byte = []byte("{}")
	var tags []string
	var runAt *time.Time
	if opts != nil {
		if len(opts.Metadata) > 0 {
			md = []byte("{")
			first := true
			for k, v := range opts.Metadata {
				if !first {
					md = append(md, ", "...)
				}
				first = false
				md = append(md, fmt.Sprintf("%q: %q", k, v)...)
			}
			md = append(md, '}')
		}
		tags = opts.Tags
		if !opts.RunAt.IsZero() {
			runAt = &opts.RunAt
		}
	}
	_, err = pool.Exec(ctx, `SELECT * FROM tenure.enqueue($1, $2::text::jsonb, metadata => $3::text::jsonb, tags => $4, run_at => $5)`,
		args.Kind(), string(payload), string(md), tags, runAt)
	return err
}

var insertPaths = []insertPath{
	{"Insert", func(ctx context.Context, c *jobs.Client, _ *pgxpool.Pool, a limitArgs, o *jobs.InsertOpts) error {
		_, err := c.Insert(ctx, a, o)
		return err
	}},
	{"InsertMany", func(ctx context.Context, c *jobs.Client, _ *pgxpool.Pool, a limitArgs, o *jobs.InsertOpts) error {
		_, err := c.InsertMany(ctx, []jobs.InsertManyParams{{Args: a, Opts: o}})
		return err
	}},
	{"InsertManyFast", func(ctx context.Context, c *jobs.Client, _ *pgxpool.Pool, a limitArgs, o *jobs.InsertOpts) error {
		_, err := c.InsertManyFast(ctx, []jobs.InsertManyParams{{Args: a, Opts: o}})
		return err
	}},
	{"tenure.enqueue", func(ctx context.Context, _ *jobs.Client, pool *pgxpool.Pool, a limitArgs, o *jobs.InsertOpts) error {
		return sqlEnqueue(ctx, pool, a, o)
	}},
}

// refusedCleanly: an insert path's refusal is a typed Go error, or a SQL error with the
// invalid-parameter or check-violation code, never anything else.
func refusedCleanly(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		require.Contains(t, []string{"22023", "23514"}, pe.Code, "%s: %v", what, err)
		return
	}
	var oe *jobs.OptionError
	var ple *generics.PayloadError
	require.True(t, errors.As(err, &oe) || errors.As(err, &ple), "%s: untyped error %T %v", what, err, err)
}

// TestLimitBoundaries walks each limit a job carries at insert on every insert path: the value
// at the limit is accepted by every path, one past it refused by every path, with a typed
// error, and nothing is written.
func TestLimitBoundaries(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	count := func() (n int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenure.jobs`).Scan(&n))
		return n
	}
	metaOfSize := func(n int) map[string]string { // {"k": "…"} of n bytes of jsonb text
		return map[string]string{"k": strings.Repeat("v", n-len(`{"k": ""}`))}
	}
	tagsN := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("t%d", i)
		}
		return out
	}
	cases := []struct {
		limit     string
		at, above func() (limitArgs, *jobs.InsertOpts)
	}{
		{"args", func() (limitArgs, *jobs.InsertOpts) { return blobOfSize(generics.MaxArgsBytes), nil },
			func() (limitArgs, *jobs.InsertOpts) { return blobOfSize(generics.MaxArgsBytes + 1), nil }},
		{"metadata", func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{Metadata: metaOfSize(generics.MaxMetadataBytes)}
		}, func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{Metadata: metaOfSize(generics.MaxMetadataBytes + 1)}
		}},
		{"tags", func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{Tags: tagsN(generics.MaxTags)}
		},
			func() (limitArgs, *jobs.InsertOpts) {
				return limitArgs{}, &jobs.InsertOpts{Tags: tagsN(generics.MaxTags + 1)}
			}},
		{"tag", func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{Tags: []string{strings.Repeat("t", generics.MaxTagBytes)}}
		}, func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{Tags: []string{strings.Repeat("t", generics.MaxTagBytes+1)}}
		}},
		{"run_at (last instant)", func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{RunAt: generics.MaxJobTime.Add(-time.Microsecond)}
		}, func() (limitArgs, *jobs.InsertOpts) { return limitArgs{}, &jobs.InsertOpts{RunAt: generics.MaxJobTime} }},
		{"run_at (first instant)", func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{RunAt: generics.MinJobTime}
		}, func() (limitArgs, *jobs.InsertOpts) {
			return limitArgs{}, &jobs.InsertOpts{RunAt: generics.MinJobTime.Add(-time.Microsecond)}
		}},
	}
	for _, tc := range cases {
		for _, p := range insertPaths {
			before := count()
			a, o := tc.at()
			require.NoError(t, p.insert(ctx, c, pool, a, o), "%s at the limit via %s", tc.limit, p.name)
			require.Equal(t, before+1, count(), "%s at the limit via %s", tc.limit, p.name)
			a, o = tc.above()
			refusedCleanly(t, p.insert(ctx, c, pool, a, o), tc.limit+" past the limit via "+p.name)
			require.Equal(t, before+1, count(), "%s past the limit via %s wrote a row", tc.limit, p.name)
		}
	}
}

// TestJobTimesEveryPathEveryReader: run_at values outside the window every reader can hold
// ('infinity', '-infinity', 4000 BC, year 10000) are refused by every insert path, including
// a hand-written INSERT and UPDATE (the database's domain), so List, Get, Cancel and Stats keep
// working. Before the fix tenure.enqueue accepted 'infinity' and every List then failed
// ("cannot scan Infinity into *time.Time").
func TestJobTimesEveryPathEveryReader(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	c, err := jobs.NewClient(pool, nil)
	require.NoError(t, err)
	row, err := c.Insert(ctx, limitArgs{S: "ok"}, nil)
	require.NoError(t, err)
	for _, v := range []string{"infinity", "-infinity", "4000-01-01 BC", "10000-01-01", "2200-01-01 00:00:00+00", "1969-12-31 23:59:59.999999+00"} {
		_, err := pool.Exec(ctx, `SELECT tenure.enqueue('limit_blob', '{"s": "x"}', run_at => $1::timestamptz)`, v)
		var pe *pgconn.PgError
		require.ErrorAs(t, err, &pe, "tenure.enqueue run_at %s", v)
		require.Equal(t, "22023", pe.Code, "tenure.enqueue run_at %s: %v", v, err)
		require.Contains(t, pe.Message, "run_at", v)
		for _, stmt := range []string{
			`INSERT INTO tenure.jobs (kind, payload, run_at) VALUES ('limit_blob', '{}', $1::timestamptz)`,
			`UPDATE tenure.jobs SET run_at = $1::timestamptz WHERE id = ` + fmt.Sprint(row.Job.ID),
			`UPDATE tenure.jobs SET created_at = $1::timestamptz WHERE id = ` + fmt.Sprint(row.Job.ID),
		} {
			_, err := pool.Exec(ctx, stmt, v)
			require.ErrorAs(t, err, &pe, "%s with %s", stmt, v)
			require.Equal(t, "23514", pe.Code, "%s with %s: %v", stmt, v, err)
			require.Equal(t, "jobs_time_range", pe.ConstraintName)
		}
	}
	for _, when := range []time.Time{time.Date(-3999, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, err := c.Insert(ctx, limitArgs{S: "x"}, &jobs.InsertOpts{RunAt: when})
		var oe *jobs.OptionError
		require.ErrorAs(t, err, &oe, "RunAt %v", when)
		require.Equal(t, "RunAt", oe.Field)
	}
	_, err = c.Insert(ctx, limitArgs{S: "x"}, &jobs.InsertOpts{Delay: 200 * 365 * 24 * time.Hour})
	var oe *jobs.OptionError
	require.ErrorAs(t, err, &oe, "a Delay past the window")
	// The edges are readable by every reader.
	_, err = pool.Exec(ctx, `SELECT tenure.enqueue('limit_blob', '{"s": "late"}', run_at => '2199-12-31 23:59:59.999999+00')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT tenure.enqueue('limit_blob', '{"s": "early"}', run_at => '1970-01-01 00:00:00+00')`)
	require.NoError(t, err)
	page, err := c.List(ctx, jobs.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 3)
	for _, j := range page.Jobs {
		got, err := c.Get(ctx, j.ID)
		require.NoError(t, err)
		require.False(t, got.RunAt.Before(generics.MinJobTime) || !got.RunAt.Before(generics.MaxJobTime))
	}
	st, err := c.Stats(ctx, time.Hour)
	require.NoError(t, err)
	for _, b := range st.Bands {
		require.GreaterOrEqual(t, int64(b.OldestReadyAge), int64(0), "%+v", b)
		require.Less(t, b.OldestReadyAge, 100*365*24*time.Hour, "%+v", b)
	}
}
